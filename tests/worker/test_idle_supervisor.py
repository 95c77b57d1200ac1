"""An idle supervisor closes its pub/sub connection (the children's `w:<child>` channels)
once no child has held a job for `--idle-disconnect` seconds, and reopens it when a child
starts one: a job taken meanwhile is still taken away from its child when canceled."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
import redis

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, alive, wait_until
from tests.worker.jobs import ledger
from tests.worker.test_idle_leader import registered

pytestmark = pytest.mark.timeout(120)


def clients(r: redis.Redis) -> dict[str, dict[str, str]]:
    return {str(c["id"]): c for c in r.client_list()}


def idle_worker(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
    children: int, disconnect: str,
) -> tuple[WorkerProcess, set[str]]:
    """Start a worker, wait until its leader is registered and its reaper has called once,
    and return it with the connections open before it started (the test's own)."""
    qless_client.queues["other"].put("tests.worker.jobs.ok", {})  # (opens the test's conns)
    registered(qless_client)
    before = set(clients(r))
    worker = start_worker("q", "-n", str(children), "--idle-disconnect", disconnect)
    worker.wait_children(children)
    wait_until(lambda: registered(qless_client), timeout=15)
    time.sleep(1.5)  # the reaper's first call, about a second after the start, has opened
    return worker, before


def worker_connections(r: redis.Redis, before: set[str]) -> dict[str, dict[str, str]]:
    return {i: c for i, c in clients(r).items() if i not in before}


def supervisor_listens(r: redis.Redis) -> bool:
    """Tell whether the supervisor's `w:<child>` channels are subscribed."""
    return bool(r.pubsub_channels("ql:w:*"))


@pytest.mark.parametrize("children", [1, 4])
def test_an_idle_worker_holds_three_connections(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
    children: int,
) -> None:
    worker, before = idle_worker(qless_client, r, start_worker, children, "1")
    # The leader's engine and pub/sub connections and the lease reaper's: the supervisor's
    # pub/sub connection is closed once no child has held a job for a second.
    wait_until(lambda: not supervisor_listens(r), timeout=10)
    time.sleep(2.5)  # and it stays closed
    conns = worker_connections(r, before)
    assert len(conns) == 3, conns
    assert sum(1 for c in conns.values() if "P" in c["flags"]) == 1  # the leader's only
    # A job reopens it while the job runs; idle again, the worker lets it go again.
    queue = qless_client.queues["q"]
    jid = queue.put("tests.worker.jobs.sleepy", {"seconds": 1.5})
    wait_until(lambda: ledger(r, "started", jid), timeout=10)
    wait_until(lambda: supervisor_listens(r), timeout=5)
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=10)
    # (the job's child now holds more: the job's own ledger writes, its heartbeat)
    wait_until(lambda: not supervisor_listens(r), timeout=10)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_with_zero_the_supervisor_keeps_its_connection(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
) -> None:
    worker, before = idle_worker(qless_client, r, start_worker, 1, "0")
    time.sleep(3)
    conns = worker_connections(r, before)
    assert len(conns) == 4 and supervisor_listens(r), conns
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize("target", ["cancel_self", "sleep_long"])
def test_a_job_taken_after_the_idle_spell_is_still_killed_when_canceled(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
    target: str,
) -> None:
    """`cancel_self`: the cancel comes before the supervisor can have subscribed again, so
    only its re-check can find it; `sleep_long`: canceled once running, as a user would."""
    worker, _ = idle_worker(qless_client, r, start_worker, 2, "0.5")
    wait_until(lambda: not supervisor_listens(r), timeout=10)
    queue = qless_client.queues["q"]
    jid = queue.put(f"tests.worker.jobs.{target}", {"seconds": 60})
    first = wait_until(lambda: ledger(r, "started", jid), timeout=10)[0]
    t0 = time.monotonic()
    if target == "sleep_long":
        qless_client.jobs[jid].cancel()
    # The heartbeat would notice only after ~30 s: the supervisor kills the child at once.
    wait_until(lambda: not alive(first["pid"]), timeout=5)
    assert time.monotonic() - t0 < 5
    assert not ledger(r, "done", jid)
    after = queue.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=10)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_a_job_reported_late_after_the_wake_up_is_still_killed_when_canceled(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
) -> None:
    """The first job wakes the supervisor's channels; the second, taken by the next leader
    meanwhile, is canceled before its child reports it (tests/worker/late_start.py), so after
    the supervisor's re-check: its late report is re-checked on its own."""
    qless_client.queues["other"].put("tests.worker.jobs.ok", {})
    registered(qless_client)
    worker = start_worker("q", "-n", "2", "--idle-disconnect", "0.5",
                          "--import", "tests.worker.late_start")
    worker.wait_children(2)
    wait_until(lambda: registered(qless_client), timeout=15)
    wait_until(lambda: not supervisor_listens(r), timeout=10)
    queue = qless_client.queues["q"]
    first = queue.put("tests.worker.jobs.sleepy", {"seconds": 4})
    late = queue.put("tests.worker.jobs.sleep_long", {"seconds": 60, "late": True})
    popped = wait_until(lambda: ledger(r, "popped", late), timeout=10)[0]
    assert popped["pid"] != wait_until(lambda: ledger(r, "started", first))[0]["pid"]
    # The heartbeat would notice only after ~30 s: the supervisor kills the child at once.
    wait_until(lambda: not alive(popped["pid"]), timeout=5)
    assert not ledger(r, "done", late)
    wait_until(lambda: qless_client.jobs[first].state == "complete", timeout=15)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
