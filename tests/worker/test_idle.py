"""Idle workers cost Redis next to nothing, yet start timed work on time.

The idle leader (the one child holding the leader token) waits for the engine's messages
(hand-offs, wake-ups) and calls the engine again only at the due time it was told, or after
`--interval` (60 s here); the other idle children wait for the token without Redis. A
timer written after every child went idle (a delayed put, a retry with a delay, a new
recurring job) makes the engine publish the queue's wake-up, so the work still starts near
its due time, not at the next re-check. Bounds are generous (a shared machine) but far
below the 60 s re-check, and the engine-call counts far below one call per child per second.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, alive, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(90)

CHILDREN = 3
LATE = 8.0  # seconds a due job may start late here (shared machine); the re-check is 60 s


def idle_worker(start_worker: Callable[..., WorkerProcess], qless_client: Client,
                *extra: str) -> WorkerProcess:
    """Start a worker with CHILDREN children on "q" and wait until every child runs and
    their leader is registered idle (the others wait for its token, see test_idle_leader)."""
    worker = start_worker("q", "-n", str(CHILDREN), "--name", "idler", "--interval", "60",
                          *extra)
    worker.wait_children(CHILDREN)
    names = {f"idler-{i}" for i in range(CHILDREN)}
    wait_until(lambda: names & set(qless_client.redis.hgetall("ql:idle")), timeout=15)
    return worker


def started_at(qless_client: Client, jid: str, timeout: float) -> float:
    """Wait until `jid` started; return when (time.time())."""
    rows = wait_until(lambda: ledger(qless_client.redis, "started", jid), timeout=timeout)
    return float(rows[0]["t"])


def test_a_job_put_with_a_delay_while_idle_starts_near_its_due_time(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client)
    due = time.time() + 2.0
    jid = qless_client.queues["q"].put("tests.worker.jobs.ok", {}, delay=2.0)
    t = started_at(qless_client, jid, timeout=2.0 + LATE)
    assert due - 0.5 <= t <= due + LATE
    worker.quit()


def test_a_retry_with_a_delay_while_idle_starts_near_its_due_time(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    q = qless_client.queues["q"]
    jid = q.put("tests.worker.jobs.ok", {})
    (job,), _ = qless_client.reserve(["q"], 1, worker="outsider")  # held elsewhere
    worker = idle_worker(start_worker, qless_client)
    due = time.time() + 2.0
    job.retry(delay=2.0)
    t = started_at(qless_client, jid, timeout=2.0 + LATE)
    assert due - 0.5 <= t <= due + LATE
    worker.quit()


def test_a_recurring_job_added_while_idle_runs_on_time(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client)
    due = time.time() + 2.0
    rjid = qless_client.queues["q"].recur("tests.worker.jobs.ok", {}, 3600, offset=2.0)
    rows = wait_until(lambda: ledger(qless_client.redis, "started"), timeout=2.0 + LATE)
    assert rows[0]["jid"].startswith(rjid)
    assert due - 0.5 <= rows[0]["t"] <= due + LATE
    worker.quit()


def engine_calls(qless_client: Client) -> int:
    """Return the engine calls (FCALL, EVALSHA, EVAL) this Redis served so far."""
    stats = qless_client.redis.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("fcall", "evalsha", "eval"))


@pytest.mark.timeout(120)
def test_idle_engine_calls_do_not_grow_with_the_window(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client)
    time.sleep(3.0)  # the supervisor's first reap (soon after its start) is behind us

    def window(seconds: float) -> int:
        before = engine_calls(qless_client)
        time.sleep(seconds)
        return engine_calls(qless_client) - before

    short, long = window(3.0), window(9.0)
    # One call per child per second (the old idle cap) would be 9 and 27. What is left: the
    # supervisor's reap + config.get, due at most once in any 30 s while idle.
    assert long <= short + 2, (short, long)
    assert long <= 2, (short, long)
    worker.quit()


def test_idle_children_leave_promptly_when_the_supervisor_is_killed(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Without the parent-death signal: the children check getppid() while they wait.
    worker = idle_worker(start_worker, qless_client, "--import", "tests.worker.no_pdeathsig")
    kids = worker.wait_children(CHILDREN)
    time.sleep(0.5)
    worker.signal(signal.SIGKILL)
    worker.proc.wait(timeout=5)
    t0 = time.monotonic()
    wait_until(lambda: not any(alive(k) for k in kids), timeout=10)
    assert time.monotonic() - t0 < 10  # the re-check is 60 s: the getppid() checks did it
