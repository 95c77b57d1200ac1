"""Pub/sub on a sharded deployment: one connection per node carrying every shard that node
holds (core/engine/pubsub.py), a shard's channels followed across a slot move, and a worker's
channels following its queue to a new shard. Real local clusters, real worker processes."""

from __future__ import annotations

import signal
from collections.abc import Callable
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from django_qless.core.client import Client
from django_qless.core.cluster.queue_move import QueueMove
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.engine.pubsub import Hub, Subscription
from tests.cluster.shard_workers import SHARDS
from tests.helpers import WorkerProcess, alive, wait_until
from tests.worker.jobs import ledger
from testservers.cluster import LocalCluster

pytestmark = pytest.mark.timeout(240)


def until(cond: Callable[[], object], timeout: float, what: str | Callable[[], str]) -> Any:
    """Wait for `cond` (tests.helpers.wait_until), saying what was awaited on failure."""
    try:
        return wait_until(cond, timeout)
    except AssertionError:
        said = what() if callable(what) else what
        raise AssertionError(f"not within {timeout}s: {said}") from None


def primary_port(cluster: LocalCluster, client: Client) -> int:
    return cluster.primary_for_key(client.keyspace.prefix).port


def subscriber_ids(cluster: LocalCluster) -> dict[int, set[str]]:
    """Return, per primary port, the ids of the connections holding sharded subscriptions."""
    ids = {}
    for node in cluster.primaries():
        clients = node.conn().execute_command("CLIENT", "LIST")
        lines = clients.splitlines() if isinstance(clients, str) else clients
        ids[node.port] = {str(line).split("id=")[1].split()[0] for line in lines
                          if int(str(line).split(" ssub=")[1].split()[0]) > 0}
    return ids


@pytest.fixture
def sharded_subscribers(cluster: LocalCluster) -> Callable[[], dict[int, int]]:
    """Count, per primary port, the connections holding sharded subscriptions opened since
    the test began (the session's cluster may still hold those of earlier tests' processes
    while they exit)."""
    before = subscriber_ids(cluster)

    def count() -> dict[int, int]:
        return {port: len(ids - before.get(port, set()))
                for port, ids in subscriber_ids(cluster).items()}

    return count


def put(client: Client, queue: str) -> str:
    return client.queues[queue].put("tests.worker.jobs.ok", {})


def next_message(sub: Subscription, timeout: float = 5.0) -> dict[str, object]:
    """Return the next published message of `sub` (confirmations skipped)."""
    found: list[dict[str, object]] = []

    def got() -> bool:
        msg = sub.get(timeout=0.1)
        if msg is not None and msg["type"] == "smessage":
            found.append(msg)
        return bool(found)

    until(got, timeout, f"a message on {sub}")
    return found[0]


def subscribe(sub: Subscription, channels: list[str]) -> None:
    """Subscribe and wait for every confirmation."""
    pending = sub.subscribe(channels)

    def confirmed() -> bool:
        nonlocal pending
        msg = sub.get(timeout=0.1)
        if msg is not None and Subscription.confirms(msg):
            pending -= 1
        return pending == 0

    until(confirmed, 5, "the subscription to be confirmed")


def test_one_connection_per_node_carries_every_shard_it_holds(
    cluster: LocalCluster, sharded: ShardedClient,
    sharded_subscribers: Callable[[], dict[int, int]],
) -> None:
    hub = Hub()
    subs = {c.shard: Subscription(c, hub) for c in sharded.clients()}
    try:
        for sub in subs.values():
            subscribe(sub, [sub.keyspace.channel("log")])
        assert len(hub.nodes()) == 3, hub
        counts = sharded_subscribers()
        assert counts == {n.port: 1 for n in cluster.primaries()}, counts
        # Every shard's events arrive, each on its own view.
        for client in sharded.clients():
            jid = put(client, f"q-{client.shard}")
            msg = next_message(subs[client.shard])
            assert msg["channel"] == client.keyspace.channel("log")
            assert jid in str(msg["data"])
        for sub in subs.values():
            extra = sub.get(timeout=0.1)
            assert extra is None, extra  # nothing was delivered twice
    finally:
        hub.close()
    assert len(hub.nodes()) == 0


def test_a_moved_slot_resubscribes_that_shard_alone_on_its_new_node(
    cluster: LocalCluster, sharded: ShardedClient,
    sharded_subscribers: Callable[[], dict[int, int]],
) -> None:
    hub = Hub()
    clients = sharded.clients()
    subs = {c.shard: Subscription(c, hub) for c in clients}
    moved = clients[0]
    # A shard on the same primary as the moved one: it must not notice anything.
    neighbour = next(c for c in clients[1:]
                     if primary_port(cluster, c) == primary_port(cluster, moved))
    try:
        for sub in subs.values():
            subscribe(sub, [sub.keyspace.channel("log")])
        source = cluster.primary_for_key(moved.keyspace.prefix)
        target = next(n for n in cluster.primaries() if n is not source)
        cluster.migrate_slot(cluster.slot_for_key(moved.keyspace.prefix), target)
        # The server dropped the moved slot's channels: that view (alone) says so.
        sub = subs[moved.shard]
        with pytest.raises(redis.ConnectionError, match="slot moved"):
            until(lambda: sub.get(timeout=0.1) is not None and False, 5, "the drop")
        sub.close()
        subscribe(sub, [sub.keyspace.channel("log")])  # on the slot's new primary
        assert len(hub.nodes()) == 3  # the target's connection is shared, not a new one
        assert sharded_subscribers()[target.port] == 1
        jid = put(moved, "moved-q")
        assert jid in str(next_message(sub)["data"])
        jid = put(neighbour, "other-q")
        assert jid in str(next_message(subs[neighbour.shard])["data"])
    finally:
        hub.close()


def test_a_killed_primary_s_shards_resubscribe_on_the_promoted_replica(
    cluster: LocalCluster, sharded: ShardedClient,
    sharded_subscribers: Callable[[], dict[int, int]],
) -> None:
    hub = Hub()
    clients = sharded.clients()
    subs = {c.shard: Subscription(c, hub) for c in clients}
    victim = cluster.primary_for_key(clients[0].keyspace.prefix)
    on_victim = [c for c in clients if primary_port(cluster, c) == victim.port]
    assert len(on_victim) >= 2  # a connection shared by shards
    try:
        for sub in subs.values():
            subscribe(sub, [sub.keyspace.channel("log")])
        heir = cluster.kill_primary(victim)
        for client in on_victim:  # the broken connection tells both of its shards
            sub = subs[client.shard]
            with pytest.raises(redis.ConnectionError):
                until(lambda s=sub: s.get(timeout=0.1) is not None and False, 10, "the loss")
            sub.close()

            def back(s: Subscription = sub) -> bool:
                try:
                    subscribe(s, [s.keyspace.channel("log")])
                except (redis.ConnectionError, AssertionError):
                    s.close()  # the map may still name the dead node: try again
                    return False
                return True

            until(back, 30, "a subscription on the promoted replica")
        assert sharded_subscribers()[heir.port] == 1  # both shards, one connection
        assert len(hub.nodes()) == 3
        for client in on_victim:
            jid = put(client, "after-kill")
            assert jid in str(next_message(subs[client.shard])["data"])
    finally:
        hub.close()


def test_a_worker_holds_one_subscriber_connection_per_node_and_process(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess],
    sharded_subscribers: Callable[[], dict[int, int]],
) -> None:
    queues = []
    for index in range(SHARDS):
        sharded.placement.record(f"q{index}", index)
        queues.append(f"q{index}")
    worker = start("-n", "2", ",".join(queues))
    worker.wait_children(2)
    # The supervisor (w:<child> in 6 shards) and each child (wake:<queue> in 6 shards): one
    # connection per primary each, 3 per primary; one per shard would be 6.
    until(lambda: sharded_subscribers() == {n.port: 3 for n in
                                                         cluster.primaries()},
               30, lambda: f"3 subscriber connections per primary: {sharded_subscribers()}")
    jids = [put(sharded.for_queue(q), q) for q in queues]
    until(lambda: {r["jid"] for r in ledger(rc, "done")} >= set(jids), 60,
               "every shard's job to run")
    worker.signal(signal.SIGQUIT)
    assert worker.wait(60) == 0


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_cancel_reaches_a_worker_on_the_shard_its_queue_moved_to(
    cluster: LocalCluster, sharded: ShardedClient, rc: RedisCluster,
    start: Callable[..., WorkerProcess], processes: str,
) -> None:
    sharded.placement.record("mq", 0)
    source = sharded.for_queue("mq")
    # The target on another primary: its channels are on another node.
    target = next(c for c in sharded.clients()
                  if primary_port(cluster, c) != primary_port(cluster, source))
    worker = start("-n", processes, "--name", "mover", "mq")
    if processes != "0":
        worker.wait_children(1)
    QueueMove(sharded, "mq", target.shard or "", settle=0.5).run()
    assert sharded.for_queue("mq").shard == target.shard
    jid = put_sleepy(target)
    started = until(lambda: ledger(rc, "started", jid), 60, "the moved job to start")[0]
    # The worker listens on `w:` in the target shard too now (looked up once a second).
    node = cluster.primary_for_key(target.keyspace.prefix).conn()
    until(lambda: node.execute_command(
        "PUBSUB", "SHARDCHANNELS", target.keyspace.pattern("w:mover*")), 30,
        "the worker channel to be heard in the target shard")
    target.jobs[jid].cancel()
    # Heard at once (the job runs 60 s, its lease 60 s: no heartbeat would tell it).
    until(lambda: jid in worker.stderr() and "canceled" in worker.stderr(), 15,
               "the worker to abort the canceled job")
    if processes != "0":
        until(lambda: not alive(int(str(started["pid"]))), 15, "the child to be killed")
    assert not ledger(rc, "done", jid)
    worker.signal(signal.SIGQUIT)
    assert worker.wait(60) == 0


def put_sleepy(client: Client) -> str:
    return client.queues["mq"].put("tests.worker.jobs.sleepy", {"seconds": 60})
