"""A worker started while Redis is unreachable waits a bounded time, then exits with 1."""

from __future__ import annotations

import signal
import socket
import threading
import time
from collections.abc import Iterator
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
        wait_until(lambda: "trying for up to 30s" in worker.stderr(), timeout=15)
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


@pytest.fixture
def silent_server() -> Iterator[str]:
    """A TCP listener on loopback that accepts connections and never answers: the URL."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])  # kept open, never read or written
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"redis://:s3cret@127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


SILENT_LIMIT = 3.0


def assert_gave_up_in_time(code: int, elapsed: float, log: str) -> None:
    """Exit 1 within the start timeout (plus start-up), a warning at the first failure."""
    assert code == 1, log
    assert SILENT_LIMIT <= elapsed < SILENT_LIMIT + 3, (elapsed, log)
    assert "WARNING" in log and "waiting for Redis at redis://:***@127.0.0.1" in log, log
    assert "giving up" in log and "s3cret" not in log, log


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_server_that_never_answers_is_given_up_on_within_the_start_timeout(
    tmp_path: Path, silent_server: str, processes: str
) -> None:
    started = time.monotonic()
    worker = fault_worker(silent_server, ["--start-timeout", str(SILENT_LIMIT), "-n", processes,
                                          "q"], tmp_path)
    try:
        code = worker.wait(timeout=SILENT_LIMIT + 20)
        elapsed = time.monotonic() - started
        log = worker.stderr()
    finally:
        worker.kill_all()
    assert_gave_up_in_time(code, elapsed, log)
    # The warning came at the first failed attempt (its 3 s socket timeout at most), not
    # after several attempts of 5 s each.
    first = next(line for line in log.splitlines() if "waiting for Redis" in line)
    assert "unreachable (" in first and f"up to {SILENT_LIMIT:g}s" in first, first


def test_the_django_worker_gives_up_on_a_silent_server_within_the_start_timeout(
    silent_server: str
) -> None:
    from tests.app.helpers import manage

    started = time.monotonic()
    result = manage(silent_server, "qless_worker", "-p", "0", "--skip-checks",
                    "--start-timeout", str(SILENT_LIMIT))
    elapsed = time.monotonic() - started
    # (Django's start-up, before the wait, is counted in `elapsed`: a second for it)
    assert_gave_up_in_time(result.returncode, max(SILENT_LIMIT, elapsed - 1.0),
                           result.stderr + result.stdout)
    assert "(QLESS alias 'default')" in result.stderr
