"""Small helpers shared by the worker, fault and app suites."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["WorkerProcess", "alive", "children_of", "client_at", "cmdline", "free_port",
           "wait_until"]

ROOT = Path(__file__).resolve().parents[1]


def wait_until(cond: Callable[[], Any], timeout: float = 10.0, step: float = 0.01) -> Any:
    """Poll `cond` until it returns something truthy; fail the test after `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {cond}")
        time.sleep(step)


def alive(pid: int) -> bool:
    """Tell whether `pid` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def free_port() -> int:
    """Return a loopback TCP port nobody listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """Return the pids whose parent is `pid` (from /proc)."""
    kids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                stat = fh.read()
        except OSError:
            continue
        # Field 4 (ppid) follows the parenthesised command, which may contain spaces.
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] != "Z" and int(fields[1]) == pid:
            kids.append(int(entry))
    return sorted(kids)


def client_at(conn: Any, when: float, worker: str = "w1") -> Any:
    """Return a core Client whose engine calls carry `when` as the time (a fixed test clock)."""
    import inspect

    from django_qless.core import Client

    # The clock hook is `clock` or, where the engine judges leases by the server's clock
    # unless told otherwise, the testing-only `_clock`.
    hook = "_clock" if "_clock" in inspect.signature(Client).parameters else "clock"
    return Client(conn, worker_name=worker, **{hook: lambda: when})


def cmdline(pid: int) -> str:
    """Return a process's title as ps shows it."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()


# What /proc/<pid>/task/<tid>/status says about a thread's signals (pending, blocked, ...).
_STATUS_LINES = ("Name", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt")


class WorkerProcess:
    """A worker started with the CLI in its own session (so teardown can kill everything)."""

    def __init__(self, url: str, args: list[str], tmp: Path, *,
                 jobs_module: str = "tests.worker.jobs", capture_stdout: bool = True,
                 wait_timeout: float = 15.0, children_timeout: float = 10.0,
                 package_root: Path = ROOT) -> None:
        self.stderr_path = tmp / f"worker-{time.monotonic_ns()}.err"
        self.sandbox_root = tmp / "sandboxes"
        self.wait_timeout = wait_timeout
        self.children_timeout = children_timeout
        argv = [
            sys.executable, "-m", "django_qless.core.workers", "--url", url,
            "--import", jobs_module, "--sandbox-root", str(self.sandbox_root), "-v",
            *args,
        ]
        # (`package_root`: where django_qless comes from, another copy of it for a rolling
        # upgrade; the tests' job modules still come from ROOT)
        path = os.pathsep.join(dict.fromkeys((str(package_root), str(ROOT))))
        env = {**os.environ, "PYTHONPATH": path}
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in kill_all
        self.proc = subprocess.Popen(
            argv, cwd=package_root, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
            stderr=self._err, start_new_session=True,
        )
        self.pid = self.proc.pid

    def children(self) -> list[int]:
        """Return the supervisor's live children."""
        return children_of(self.pid)

    def wait_children(self, n: int, timeout: float | None = None) -> list[int]:
        """Wait until the supervisor has `n` children; return their pids."""
        return list(wait_until(lambda: (lambda k: k if len(k) == n else None)(self.children()),
                               timeout or self.children_timeout))

    def signal(self, signum: int) -> None:
        """Send a signal to the worker process."""
        os.kill(self.pid, signum)

    def quit(self) -> None:
        """Stop the worker gracefully (QUIT) and check it exits 0."""
        self.signal(signal.SIGQUIT)
        assert self.wait() == 0

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the worker to exit; return its exit code (fail with its log if it hangs)."""
        timeout = timeout or self.wait_timeout
        try:
            code = self.proc.wait(timeout=timeout)
            if code != 0:
                # Shown by pytest if the test fails on the exit code.
                sys.stderr.write(f"--- worker stderr ---\n{self.stderr()[-6000:]}\n")
            return code
        except subprocess.TimeoutExpired:
            titles = [cmdline(p) for p in [self.pid, *self.children()] if alive(p)]
            self._dump_stacks()
            raise AssertionError(
                f"worker did not exit within {timeout}s; processes: {titles}\n"
                f"--- worker stderr ---\n{self.stderr()[-6000:]}"
            ) from None

    def _dump_stacks(self) -> None:
        """Show why a worker hangs: each thread's signal masks (printed) and its Python
        stacks (USR2 makes faulthandler write them to the worker's log)."""
        for pid in [self.pid, *self.children()]:
            for task in sorted(Path(f"/proc/{pid}/task").glob("*")):
                try:
                    lines = (task / "status").read_text().splitlines()
                except OSError:
                    continue
                masks = [ln.replace("\t", "") for ln in lines if ln.startswith(_STATUS_LINES)]
                sys.stderr.write(f"pid {pid} thread {task.name}: {' '.join(masks)}\n")
            try:
                os.kill(pid, signal.SIGUSR2)
            except ProcessLookupError:
                pass
        time.sleep(1.0)

    def stderr(self) -> str:
        """Return what the worker wrote to stderr so far."""
        return self.stderr_path.read_text(errors="replace")

    def stdout(self) -> str:
        """Return the worker's stdout (after it exited)."""
        assert self.proc.stdout is not None
        return self.proc.stdout.read().decode()

    def kill_all(self) -> None:
        """Kill the worker's whole session (teardown)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._err.close()
