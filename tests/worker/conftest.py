"""Worker test harness: real Redis, real worker subprocesses, real signals, hard timeouts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from django_qless.core.client import Client
from tests.helpers import alive, children_of, wait_until  # noqa: F401 - re-exported

ROOT = Path(__file__).resolve().parents[2]








def cmdline(pid: int) -> str:
    """Return a process's title as ps shows it."""
    with open(f"/proc/{pid}/cmdline", "rb") as fh:
        return fh.read().replace(b"\0", b" ").decode(errors="replace").strip()


class WorkerProcess:
    """A worker started with the CLI in its own session (so teardown can kill everything)."""

    def __init__(self, url: str, args: list[str], tmp: Path) -> None:
        self.stderr_path = tmp / f"worker-{time.monotonic_ns()}.err"
        self.sandbox_root = tmp / "sandboxes"
        argv = [
            sys.executable, "-m", "django_qless.core.workers", "--url", url,
            "--import", "tests.worker.jobs", "--sandbox-root", str(self.sandbox_root), "-v",
            *args,
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self._err = open(self.stderr_path, "w")  # noqa: SIM115 - closed in kill_all
        self.proc = subprocess.Popen(
            argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=self._err, start_new_session=True,
        )
        self.pid = self.proc.pid

    def children(self) -> list[int]:
        """Return the supervisor's live children."""
        return children_of(self.pid)

    def wait_children(self, n: int, timeout: float = 10.0) -> list[int]:
        """Wait until the supervisor has `n` children; return their pids."""
        return wait_until(lambda: (lambda k: k if len(k) == n else None)(self.children()),
                          timeout)

    def signal(self, signum: int) -> None:
        """Send a signal to the worker process."""
        os.kill(self.pid, signum)

    def wait(self, timeout: float = 15.0) -> int:
        """Wait for the worker to exit; return its exit code (fail with its log if it hangs)."""
        try:
            code = self.proc.wait(timeout=timeout)
            if code != 0:
                # Shown by pytest if the test fails on the exit code.
                sys.stderr.write(f"--- worker stderr ---\n{self.stderr()[-6000:]}\n")
            return code
        except subprocess.TimeoutExpired:
            titles = [cmdline(p) for p in [self.pid, *self.children()] if alive(p)]
            raise AssertionError(
                f"worker did not exit within {timeout}s; processes: {titles}\n"
                f"--- worker stderr ---\n{self.stderr()[-6000:]}"
            ) from None

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


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    """A core client on the flushed test database, with short leases for fault tests."""
    c = Client(redis_url, worker_name="test-client")
    yield c
    c.close()


@pytest.fixture
def work_dir() -> Iterator[Path]:
    """A private temp dir (pytest's shared basetemp may be pruned by concurrent runs)."""
    path = Path(tempfile.mkdtemp(prefix="qless-worker-test-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_worker(redis_url: str, work_dir: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start CLI workers; every one is killed (whole session) at teardown."""
    started: list[WorkerProcess] = []
    tmp_path = work_dir

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(redis_url, list(args), tmp_path)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill_all()


@pytest.fixture
def short_leases(client: Client) -> Client:
    """Heartbeat 2 s, grace 1 s: lost jobs come back in about 3 s."""
    client.config["heartbeat"] = 2
    client.config["grace-period"] = 1
    return client
