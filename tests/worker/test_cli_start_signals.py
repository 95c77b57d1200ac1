"""TERM, INT or QUIT that reaches `qless-worker` while it starts (importing job modules,
waiting for Redis) stops it with exit 0 and a line saying so: nothing was taken yet
(real subprocesses, real signals)."""

from __future__ import annotations

import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers import WorkerProcess, wait_until

pytestmark = pytest.mark.timeout(120)

STOPS = [signal.SIGTERM, signal.SIGINT, signal.SIGQUIT]


def assert_stopped_before_starting(worker: WorkerProcess) -> None:
    assert worker.wait(timeout=15) == 0
    log = worker.stderr()
    assert "stopped before starting" in log, log
    assert "Traceback" not in log, log


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: s.name)
@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_stop_while_waiting_for_redis_exits_0(
    start_worker: Callable[..., WorkerProcess], work_dir: Path, signum: signal.Signals,
    processes: str,
) -> None:
    worker = start_worker("--url", f"unix://{work_dir / 'nobody-listens.sock'}",
                          "--start-timeout", "60", "-n", processes, "q")
    wait_until(lambda: "waiting for Redis" in worker.stderr(), timeout=30)
    worker.signal(signum)
    assert_stopped_before_starting(worker)


@pytest.mark.parametrize("signum", STOPS, ids=lambda s: s.name)
def test_a_stop_while_importing_job_modules_exits_0(
    start_worker: Callable[..., WorkerProcess], signum: signal.Signals
) -> None:
    worker = start_worker("--import", "tests.worker.slow_import", "-n", "0", "q")
    wait_until(lambda: "slow_import: importing" in worker.stderr(), timeout=30)
    worker.signal(signum)
    assert_stopped_before_starting(worker)
