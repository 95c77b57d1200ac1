"""A private redis-server run under callgrind, for the tools that count its instructions.

Counting starts off (`--instr-atstart=no`): a tool turns it on around what it measures, so
start-up and warm-up are not counted. Instruction counts do not depend on the machine's
load, which is why the harness reports them next to the µs.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import redis

__all__ = ["CallgrindError", "CallgrindRedis", "Clock", "callgrind_redis", "total_instructions"]


class Clock:
    """A client clock `step` seconds later at every call (a steady rate), from `start` (default:
    now). Under valgrind Redis runs ~50x slower; the engine's time-bound memos and timers keep
    the pace of a full-speed run when the clients send this time (`Client(_clock=...)`)."""

    def __init__(self, step: float, start: float | None = None) -> None:
        self.t = time.time() if start is None else start
        self.step = step

    def __call__(self) -> float:
        self.t += self.step
        return self.t


class CallgrindError(RuntimeError):
    """valgrind is missing, or redis-server did not start under it."""


class CallgrindRedis:
    """A redis-server under callgrind on a unix socket in its own temporary directory."""

    def __init__(self, binary: str, prefix: str, extra: Sequence[str] = (),
                 tool: Sequence[str] = ()) -> None:
        if not shutil.which("valgrind") or not shutil.which("callgrind_annotate"):
            raise CallgrindError("valgrind/callgrind_annotate not found")
        self.dir = tempfile.mkdtemp(prefix=prefix)
        self.sock = os.path.join(self.dir, "redis.sock")
        self.url = f"unix://{self.sock}?db=0"
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind",
             f"--callgrind-out-file={os.path.join(self.dir, 'callgrind.out')}",
             "--instr-atstart=no", *tool, binary, "--port", "0", "--unixsocket", self.sock,
             "--unixsocketperm", "700", "--save", "", "--appendonly", "no", "--dir", self.dir,
             *extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 120
        while not os.path.exists(self.sock):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                self.close()
                raise CallgrindError("redis-server under valgrind did not start")
            time.sleep(0.2)

    def control(self, *args: str) -> None:
        """Run `callgrind_control ARGS` on the server (`-i on`, `-i off`, `-d label`)."""
        subprocess.run(["callgrind_control", *args, str(self.proc.pid)], capture_output=True,
                       check=False, timeout=60)

    def counting(self, on: bool) -> None:
        """Turn instruction counting on or off."""
        self.control("-i", "on" if on else "off")

    def stop(self) -> None:
        """Shut the server down, so callgrind writes its output files."""
        if self.proc.poll() is None:
            try:
                redis.Redis(unix_socket_path=self.sock).shutdown(nosave=True)
            except redis.ConnectionError:
                pass
        try:
            self.proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def outputs(self) -> list[Path]:
        """Return callgrind's output files (one per dump, then the final one), sorted."""
        return sorted(Path(self.dir).glob("callgrind.out*"))

    def dump_totals(self) -> dict[str, int]:
        """Return the instructions of each labelled dump (`control("-d", label)`), after stop."""
        totals: dict[str, int] = {}
        for path in self.outputs():
            text = path.read_text(errors="replace")
            label = re.search(r"^desc: Trigger: dump (.*)$", text, re.MULTILINE)
            total = re.search(r"^totals: (\d+)", text, re.MULTILINE)
            if label and total:
                totals[label.group(1)] = int(total.group(1))
        return totals

    def annotate(self, keep_as: str | None = None) -> str:
        """Return `callgrind_annotate`'s exclusive counts of the final output (after stop);
        keep a copy of that output under the temp dir as `keep_as`."""
        files = self.outputs()
        if not files:
            raise CallgrindError("no callgrind output")
        if keep_as:
            shutil.copy(files[-1], Path(tempfile.gettempdir()) / keep_as)
        return subprocess.run(
            ["callgrind_annotate", "--threshold=100", "--inclusive=no", str(files[-1])],
            capture_output=True, text=True, check=False).stdout

    def close(self) -> None:
        """Stop the server if it runs and remove its directory."""
        if self.proc.poll() is None:
            self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def callgrind_redis(binary: str, prefix: str = "bench-cg-", extra: Sequence[str] = (),
                    tool: Sequence[str] = ()) -> Iterator[CallgrindRedis]:
    """Start redis-server `binary` under callgrind (`extra`: more server options, which
    override the ones above; `tool`: more callgrind options); stop it and remove its files
    at the end."""
    server = CallgrindRedis(binary, prefix, extra, tool)
    try:
        yield server
    finally:
        server.close()


def total_instructions(path: Path) -> int:
    """Return the instructions counted in one callgrind output file (its totals line; the
    summary line of a dump after `callgrind_control -z` reads 0)."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise CallgrindError(f"no summary in {path}")
