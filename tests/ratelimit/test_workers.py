"""Rate limits with real worker subprocesses: the limited rate across workers, and an idle
worker woken by the window's opening without asking Redis meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger

__all__: list[str] = []

pytestmark = pytest.mark.timeout(90)

SLACK = 0.05  # ledger times are the jobs' clocks; the engine's is the server's (one host)
LATE = 3.0  # seconds a job may start late on a shared machine


def starts(conn: Any) -> list[float]:
    """Return the start times in the ledger, sorted."""
    return sorted(float(row["t"]) for row in ledger(conn, "started"))


def command_calls(conn: Any) -> dict[str, int]:
    """Return the calls of each command this Redis served so far."""
    return {name: int(stat["calls"]) for name, stat in conn.info("commandstats").items()}


def test_a_limited_queue_drains_at_the_limited_rate_across_two_workers(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    q = qless_client.queues["q"]
    q.set_rate_limit("3/2s")
    for i in range(9):
        q.put("tests.worker.jobs.ok", {"n": i})
    workers = [start_worker("q", "-n", "1", "--name", f"rl{i}", "--interval", "60")
               for i in range(2)]
    times = wait_until(lambda: (lambda t: t if len(t) == 9 else None)(
        starts(qless_client.redis)), timeout=30)
    # never more than 3 starts in any 2 s window: the 4th after any start is 2 s later
    for i in range(len(times) - 3):
        assert times[i + 3] - times[i] >= 2.0 - SLACK, times
    # and the windows are used: 9 jobs in three windows, the last one near 4 s after the first
    assert times[-1] - times[0] <= 4.0 + LATE
    status = q.rate_limit()
    assert status is not None and status.rate == "3/2s" and status.limited == 0
    for worker in workers:
        worker.quit()


def test_a_keyed_limit_holds_each_key_to_its_own_rate(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    q = qless_client.queues["q"]
    q.set_rate_limit("1/2s", key="customer")
    for customer in ("a", "a", "b", "b"):
        q.put("tests.worker.jobs.ok", {"customer": customer})
    worker = start_worker("q", "-n", "2", "--name", "rlk", "--interval", "60")
    rows = wait_until(lambda: (lambda r: r if len(r) == 4 else None)(
        ledger(qless_client.redis, "started")), timeout=30)
    jobs = [qless_client.jobs.get(row["jid"]) for row in rows]
    by_jid = {job.jid: job.data["customer"] for job in jobs if job is not None}
    for customer in ("a", "b"):
        t = sorted(float(row["t"]) for row in rows if by_jid[row["jid"]] == customer)
        assert t[1] - t[0] >= 2.0 - SLACK
    first = sorted(float(row["t"]) for row in rows)
    assert first[1] - first[0] < 1.0  # one job of each key started at once
    worker.quit()


def test_the_window_opening_wakes_an_idle_worker_that_asks_redis_nothing_meanwhile(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    q = qless_client.queues["q"]
    q.set_rate_limit("1/4s")
    worker = start_worker("q", "-n", "1", "--name", "rlidle", "--interval", "60")
    wait_until(lambda: "rlidle-0" in set(qless_client.redis.hgetall("ql:idle")), timeout=15)
    time.sleep(3.0)  # the supervisor's first reap (soon after its start) is behind us
    first = q.put("tests.worker.jobs.ok", {})
    second = q.put("tests.worker.jobs.ok", {})
    t0 = float(wait_until(lambda: ledger(qless_client.redis, "started", first), 20)[0]["t"])
    # the worker is idle again, told the window opens 4 s after t0: count what it sends
    time.sleep(max(0.0, t0 + 0.8 - time.time()))
    before = command_calls(qless_client.redis)
    time.sleep(2.5)
    after = command_calls(qless_client.redis)
    sent = {name: n - before.get(name, 0) for name, n in after.items()
            if n != before.get(name, 0) and name != "cmdstat_info"}
    assert sent == {}
    t1 = float(wait_until(lambda: ledger(qless_client.redis, "started", second), 20)[0]["t"])
    assert t0 + 4.0 - SLACK <= t1 <= t0 + 4.0 + LATE
    worker.quit()
