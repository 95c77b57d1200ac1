"""A worker started while Redis is unreachable waits a bounded time, then exits with 1."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from django_qless.core.client import Client
from tests.faults.conftest import TcpRedis, fault_worker, wait_until
from tests.helpers import free_port

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]

LIMIT = 1.5


@pytest.mark.parametrize("where, processes", [("tcp", "0"), ("unix", "1")])
def test_worker_gives_up_on_an_unreachable_redis_after_the_start_timeout(
    tmp_path: Path, where: str, processes: str
) -> None:
    url = (f"redis://127.0.0.1:{free_port()}/0" if where == "tcp"
           else f"unix://{tmp_path / 'nobody-listens.sock'}")
    started = time.monotonic()
    worker = fault_worker(url, ["--start-timeout", str(LIMIT), "-n", processes, "q"], tmp_path)
    try:
        code = worker.wait(timeout=LIMIT + 10)
        elapsed = time.monotonic() - started
        log = worker.stderr()
    finally:
        worker.kill_all()
    assert code == 1, log
    assert LIMIT <= elapsed < LIMIT + 5, elapsed
    assert "giving up" in log and "--start-timeout" in log
    # One warning while waiting and one error at the end, not a line per attempt.
    assert len([line for line in log.splitlines() if "unreachable" in line]) == 2, log


def test_worker_uses_a_redis_that_comes_up_within_the_start_timeout(tmp_path: Path) -> None:
    directory = tmp_path / "redis"
    directory.mkdir()
    server = TcpRedis(directory, aof=False)  # its port is chosen, nothing listens yet
    worker = fault_worker(server.url, ["--import", "tests.worker.jobs", "--start-timeout", "30",
                                         "-n", "1", "q"], tmp_path)
    client = None
    try:
        wait_until(lambda: "waiting up to 30s" in worker.stderr(), timeout=15)
        server.start()
        client = Client(server.url, worker_name="test-client")
        jid = client.queues["q"].put("tests.worker.jobs.noop", {})
        wait_until(lambda: client.jobs[jid].state == "complete", timeout=20)
        worker.signal(signal.SIGQUIT)
        assert worker.wait(timeout=15) == 0
        assert "is reachable now" in worker.stderr()
    finally:
        if client is not None:
            client.close()
        worker.kill_all()
        server.stop()
