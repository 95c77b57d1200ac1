"""Rate limits with real worker subprocesses: the limited rate across workers, and an idle
worker woken by the window's opening without asking Redis meanwhile."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from django_qless.core.client import Client
from tests.helpers import WorkerProcess, wait_until
from tests.ratelimit.admissions import AdmissionLog
from tests.worker.jobs import ledger

__all__: list[str] = []

pytestmark = pytest.mark.timeout(90)

LATE = 3.0  # seconds a job may start late on a shared machine
LOG = "ql:rl:queue:q-log"  # the queue's admissions (tests.ratelimit.admissions)


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
    with AdmissionLog(qless_client.redis, LOG) as log:
        workers = [start_worker("q", "-n", "1", "--name", f"rl{i}", "--interval", "60")
                   for i in range(2)]
        wait_until(lambda: len(ledger(qless_client.redis, "started")) == 9, timeout=30)
    times = log.times()
    assert len(times) == 9
    # never more than 3 admissions in any 2 s of the server's clock: the 4th is 2 s later
    for i in range(len(times) - 3):
        assert times[i + 3] - times[i] >= 2000, times
    # and the windows are used: 9 jobs in three windows, the last one near 4 s after the first
    assert times[-1] - times[0] <= (4.0 + LATE) * 1000
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
    logs = {customer: f"{LOG}:{customer}" for customer in ("a", "b")}
    with AdmissionLog(qless_client.redis, *logs.values()) as log:
        worker = start_worker("q", "-n", "2", "--name", "rlk", "--interval", "60")
        wait_until(lambda: len(ledger(qless_client.redis, "started")) == 4, timeout=30)
    assert len(log.seen) == 4
    for customer in ("a", "b"):
        t = sorted(ms for jid, ms in log.seen.items()
                   if qless_client.jobs[jid].data["customer"] == customer)
        assert t[1] - t[0] >= 2000, (customer, t)
    first = log.times()
    assert first[1] - first[0] < 1000  # one job of each key admitted at once
    worker.quit()


def test_the_window_opening_wakes_an_idle_worker_that_asks_redis_nothing_meanwhile(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    q = qless_client.queues["q"]
    q.set_rate_limit("1/4s")
    worker = start_worker("q", "-n", "1", "--name", "rlidle", "--interval", "60")
    wait_until(lambda: "rlidle-0" in set(qless_client.redis.hgetall("ql:idle")), timeout=15)
    time.sleep(3.0)  # the supervisor's first reap (soon after its start) is behind us
    with AdmissionLog(qless_client.redis, LOG, every=1.0) as log:
        first = q.put("tests.worker.jobs.ok", {})
        second = q.put("tests.worker.jobs.ok", {})
        wait_until(lambda: ledger(qless_client.redis, "started", first), 20)
        # the worker is idle again, told the window opens 4 s after the first: count what it
        # sends (the log's own reads are ZRANGE, not counted)
        time.sleep(0.8)
        before = command_calls(qless_client.redis)
        time.sleep(2.5)
        after = command_calls(qless_client.redis)
        wait_until(lambda: ledger(qless_client.redis, "started", second), 20)
    sent = {name: n - before.get(name, 0) for name, n in after.items()
            if n != before.get(name, 0) and name not in ("cmdstat_info", "cmdstat_zrange")}
    assert sent == {}
    t0, t1 = log.of(first), log.of(second)
    assert t0 is not None and t1 is not None
    assert t0 + 4000 <= t1 <= t0 + (4.0 + LATE) * 1000
    worker.quit()
