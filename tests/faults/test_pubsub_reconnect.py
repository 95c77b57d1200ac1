"""A supervisor whose pub/sub connection keeps being killed must not kill healthy children.

After each reconnect the supervisor re-checks the jobs its children run (events may have been
missed). A child that has just completed its job, and not yet told the supervisor, must not
be taken for one whose job was taken away.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from django_qless.core.client import Client
from tests.faults.conftest import TcpRedis, fault_worker, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(90)]

JOBS = 2000
BRIEF = "tests.worker.jobs.brief"


@pytest.fixture
def plain_redis(tmp_path: Path) -> Iterator[TcpRedis]:
    """A private TCP Redis without AOF (throughput, not durability, is under test)."""
    directory = tmp_path / "redis"
    directory.mkdir()
    server = TcpRedis(directory, aof=False).start()
    yield server
    server.stop()


def kill_pubsub_clients(conn: redis.Redis, stop: threading.Event, every: float) -> int:
    """Close every pub/sub connection each `every` seconds until `stop`; return the count."""
    killed = 0
    while not stop.wait(every):
        killed += int(conn.execute_command("CLIENT", "KILL", "TYPE", "pubsub"))
    return killed


@pytest.mark.parametrize("processes", ["3", "0"], ids=["forking", "serial"])
def test_pubsub_reconnects_during_short_jobs_abort_no_job(plain_redis, tmp_path, processes):
    client = Client(plain_redis.url, worker_name="test-client")
    # Short leases: a job cut short by a wrong kill fails (no retries) within seconds.
    client.config["heartbeat"] = 2
    client.config["grace-period"] = 1
    conn = plain_redis.conn()
    q = client.queues["q"]
    jids = q.put_many([{"klass": BRIEF, "data": {}, "retries": 0} for _ in range(JOBS)])
    worker = fault_worker(plain_redis.url, ["--import", "tests.worker.jobs", "-n", processes, "q"],
                           tmp_path)
    stop = threading.Event()
    kills: list[int] = []
    killer = threading.Thread(
        target=lambda: kills.append(kill_pubsub_clients(conn, stop, 0.05)), daemon=True)
    try:
        killer.start()
        wait_until(lambda: q.counts["waiting"] == 0 and q.counts["running"] == 0, timeout=60,
                   step=0.2)
        stop.set()
        killer.join()
        worker.signal(signal.SIGQUIT)
        assert worker.wait(timeout=20) == 0
        log = worker.stderr()
    finally:
        stop.set()
        worker.kill_all()
    assert kills[0] >= 10, "the supervisor's pub/sub connection was hardly ever killed"
    assert "connection lost" in log
    assert "taken away" not in log
    assert "killing it" not in log and "aborted" not in log
    states: dict[str, int] = {}
    for job in client.jobs.get_many(*jids):
        states[job.state] = states.get(job.state, 0) + 1
        whats = [h["what"] for h in job.history]
        # A job held ahead is handed back unstarted (history "put") when the job before it
        # passes 100 ms, which a loaded machine makes likely: each pop then follows a put.
        # A wrong kill would fail the job (no retries) or leave a pop without a put.
        assert whats.count("done") == 1, (job.jid, whats)
        assert whats.count("popped") == whats.count("put"), (job.jid, whats)
    assert states == {"complete": JOBS}
    client.close()
    conn.close()
