"""Children that wait for the idle-leader token longer than `--idle-disconnect` close their
Redis connections, and open them again when they lead: a burst of work still runs on every
child at once, and nothing handed out is lost."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, wait_until
from tests.worker.jobs import ledger
from tests.worker.test_idle_leader import registered

pytestmark = pytest.mark.timeout(120)

CHILDREN = 4
SUPERVISOR = 3  # the most connections a supervisor keeps


def client_ids(r: redis.Redis) -> set[str]:
    return {str(c["id"]) for c in r.client_list()}


def idle_worker(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
    disconnect: str,
) -> tuple[WorkerProcess, set[str]]:
    """Start a worker of CHILDREN children, wait until they are idle, and return it with the
    connections open before it started (the test's own)."""
    qless_client.queues["other"].put("tests.worker.jobs.ok", {})  # (opens the test's conns)
    registered(qless_client)
    before = client_ids(r)
    worker = start_worker("q", "-n", str(CHILDREN), "--idle-disconnect", disconnect)
    worker.wait_children(CHILDREN)
    wait_until(lambda: registered(qless_client), timeout=15)
    return worker, before


def test_children_waiting_for_the_token_hold_no_connection(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker, before = idle_worker(qless_client, r, start_worker, "0.5")
    # The leader (its engine calls and its subscriptions) and the supervisor (at most three:
    # its own calls, the lease reaper's and the worker channels'): no other child.
    wait_until(lambda: len(client_ids(r) - before) <= 2 + SUPERVISOR, timeout=10)
    queue = qless_client.queues["q"]
    jids = [queue.put("tests.worker.jobs.sleepy", {"seconds": 3}) for _ in range(CHILDREN)]
    # Each child leads in turn, reconnects, takes one job and passes the token on: all run
    # at once, each in its own child.
    wait_until(lambda: all(ledger(r, "started", j) for j in jids), timeout=15)
    assert not any(ledger(r, "done", j) for j in jids)
    pids = {ledger(r, "started", j)[0]["pid"] for j in jids}
    assert len(pids) == CHILDREN, pids
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in jids), timeout=20)
    # Idle again: the children that wait for the token let their connections go again.
    wait_until(lambda: len(client_ids(r) - before) <= 2 + SUPERVISOR, timeout=10)
    worker.quit()


def test_with_zero_every_idle_child_keeps_its_connections(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker, before = idle_worker(qless_client, r, start_worker, "0")
    # Each child subscribes once it waits: its engine and pub/sub connections stay open.
    wait_until(lambda: len(client_ids(r) - before) >= 2 * CHILDREN, timeout=10)
    worker.quit()


def test_children_taking_turns_to_lead_keep_their_connections(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Jobs longer than the hold (none here) pass the token at every start, so 16 children
    # take turns: each waits ~2.5 s for the others, longer than --idle-disconnect, while the
    # lead changes every 0.2 s. Closing after a child's own wait would reconnect at every
    # change; the lead's age keeps them all connected.
    qless_client.queues["other"].put("tests.worker.jobs.ok", {})
    registered(qless_client)
    before = client_ids(r)
    worker = start_worker("q", "-n", "16", "--idle-disconnect", "1", "--leader-hold", "0")
    worker.wait_children(16)
    wait_until(lambda: registered(qless_client), timeout=15)
    queue = qless_client.queues["q"]
    jids = []
    seen: set[str] = set()
    for i in range(50):
        jids.append(queue.put("tests.worker.jobs.sleepy", {"seconds": 0.3}))
        time.sleep(0.2)
        if i == 20:  # every child has led by now
            seen = client_ids(r) - before
    late = client_ids(r) - before - seen
    assert not late, f"{len(late)} connections opened while the children took turns"
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in jids), timeout=20)
    worker.quit()
