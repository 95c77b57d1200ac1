"""Jobs flowing through a ShardedClient over a real 3+3 cluster while a primary is killed,
failed over by hand, or has a busy shard's slot migrated away: every acknowledged job is
done, each second run has a reason, and what asynchronous replication may lose is counted.

Each test puts 2,000 jobs (three producer threads, one queue on a shard of each primary)
and reserves and completes them with three consumer threads on the shards' clients; the
fault comes once a third of the puts are acknowledged (tests/cluster/flow.py keeps the
ledger). Leases are 2 s, so a job whose completion a failover undid comes back quickly.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.audit import audit_all
from django_qless.core.cluster.args import NotDurable
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.queue import Queue
from testservers.cluster import ClusterNode, LocalCluster

from .flow import Flow, wait_until

__all__: list[str] = []

LEASE = 2  # seconds: the heartbeat config of every shard in these tests


def make_sharded(rc: RedisCluster, durable_replicas: int = 0) -> ShardedClient:
    """Return a ShardedClient of 8 shards with 2 s leases on every shard."""
    sharded = ShardedClient(rc, shards=8, durable_replicas=durable_replicas,
                            durable_timeout_ms=500)
    for client in sharded.clients():
        client.config["heartbeat"] = LEASE
    return sharded


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    client = make_sharded(rc)
    yield client
    client.close()


def queues_on_each_primary(sharded: ShardedClient, cluster: LocalCluster) -> list[str]:
    """Pin one queue to a shard on each primary; return their names."""
    by_port: dict[int, str] = {}
    for index in range(sharded.shards):
        port = cluster.primary_for_key(f"ql:{{{sharded.tags[index]}}}:").port
        if port not in by_port:
            sharded.placement.record(f"q{index}", sharded.tags[index])
            by_port[port] = f"q{index}"
    assert len(by_port) == 3
    return list(by_port.values())


def primary_of(cluster: LocalCluster, sharded: ShardedClient, queue: str) -> ClusterNode:
    """Return the primary that holds `queue`'s shard now."""
    return cluster.primary_for_key(f"ql:{{{sharded.shard_of(queue)}}}:")


def settled_replicas(cluster: LocalCluster) -> None:
    """Wait until every replica has caught up (the leases config must survive a kill)."""
    cluster.wait_settled(10)


def served_after(flow: Flow, queue: str, moment: float) -> int:
    """Return how many jobs of `queue` were completed after `moment` (monotonic)."""
    return sum(1 for jid, runs in flow.runs.items() if flow.puts[jid][0] == queue
               for run in runs if run.outcome == "acked" and run.at > moment)


def durably_put(queue: Queue, jid: str) -> bool:
    """Put job `jid` into `queue`; False if the shard's replica did not confirm it."""
    try:
        queue.put("tests.Job", {}, jid=jid)
    except NotDurable:
        return False
    return True


def assert_clean(sharded: ShardedClient) -> None:
    """Audit every shard (the core auditor: each job in the index its state implies, no
    ghost entries, locks and workers agree)."""
    reports = audit_all(sharded)
    assert len(reports) == sharded.shards
    assert sum(r.jobs for r in reports) > 0  # it walked the shards' jobs
    assert [str(r) for r in reports if not r.ok] == []


def report(flow: Flow, what: str, summary: object) -> None:
    print(f"\n{what}: {summary}; transport {flow.sharded.transport.stats}")


def test_sigkill_of_a_primary_loses_only_what_it_had_not_replicated(
    cluster: LocalCluster, sharded: ShardedClient
) -> None:
    """Asynchronous replication: a put or complete acknowledged by the killed primary in its
    last moments may be missing on the promoted replica. A lost put is a job gone; a lost
    complete runs the job again. Nothing else differs, and no other shard is touched."""
    queues = queues_on_each_primary(sharded, cluster)
    victim_queue = queues[1]
    victim = primary_of(cluster, sharded, victim_queue)
    settled_replicas(cluster)
    flow = Flow(sharded, queues)
    with flow.running():
        killed_at = time.monotonic()
        cluster.kill_primary(victim)
        promoted_at = time.monotonic()
    summary = flow.check(undone_shard=sharded.shard_of(victim_queue), undone_until=promoted_at)
    ages = sorted(killed_at - flow.puts[jid][2] for jid in summary.lost_puts)
    report(flow, f"SIGKILL (promoted after {promoted_at - killed_at:.1f} s)", summary)
    if ages:
        print(f"lost puts acknowledged {ages[-1] * 1000:.0f} to {ages[0] * 1000:.0f} ms "
              f"before the kill")
    assert summary.not_done == {} and summary.unexplained == []
    # What may be lost: acknowledged puts, all on the killed primary's shard, acknowledged
    # by it before its replica took over.
    for jid in summary.lost_puts:
        queue, _, at = flow.puts[jid]
        assert queue == victim_queue and at <= promoted_at, (jid, at - killed_at)
    assert set(summary.duplicates) <= {"undone by failover", "unknown", "refused"}
    assert summary.acked + sum(summary.unacked.values()) == flow.total
    served = served_after(flow, victim_queue, promoted_at)
    print(f"{served} jobs of the killed primary's queue completed after the promotion")
    assert served > 0  # consumers went on there
    assert_clean(sharded)


def test_sigkill_with_durable_replicas_loses_nothing_acknowledged(
    cluster: LocalCluster, rc: RedisCluster
) -> None:
    """With `durable_replicas=1` every write waits for a replica: a write it could not
    confirm raises NotDurable and counts as not acknowledged; every acknowledged put is
    done and no acknowledged complete is undone."""
    sharded = make_sharded(rc, durable_replicas=1)
    try:
        queues = queues_on_each_primary(sharded, cluster)
        victim = primary_of(cluster, sharded, queues[1])
        settled_replicas(cluster)
        flow = Flow(sharded, queues)
        with flow.running():
            cluster.kill_primary(victim)
            killed_at = time.monotonic()
            # The promoted replica has no replica of its own to WAIT for until the killed
            # node rejoins as one: until then that shard's writes raise NotDurable.
            cluster.restart(victim)
        summary = flow.check()  # no complete may be undone: none excused
        report(flow, "SIGKILL, durable_replicas=1", summary)
        assert summary.lost_puts == [] and summary.not_done == {}
        assert summary.unexplained == []
        assert set(summary.duplicates) <= {"not durable", "unknown", "refused"}
        # No write there is acknowledged between the kill and the rejoin, so these came
        # after it (the flow may have had none left for that queue by then: not asserted).
        served = served_after(flow, queues[1], killed_at)
        print(f"{served} jobs of the killed primary's queue completed after it rejoined")
        # The shard serves again, durably: a put there is acknowledged (once the rejoined
        # replica answers WAIT in time; a put not acknowledged is put again, same jid), then
        # popped and completed.
        queue = sharded.for_queue(queues[1]).queues[queues[1]]
        wait_until(lambda: durably_put(queue, "after-rejoin"), 30, "a durable put there")
        job = queue.pop()
        assert job is not None and job.jid == "after-rejoin"
        job.complete()
        assert_clean(sharded)
    finally:
        sharded.close()


def test_manual_failover_loses_nothing(cluster: LocalCluster, sharded: ShardedClient) -> None:
    """CLUSTER FAILOVER waits for the replica to catch up: no put lost, no job run twice
    except after a complete whose reply was lost."""
    queues = queues_on_each_primary(sharded, cluster)
    replica = cluster.replicas(of=primary_of(cluster, sharded, queues[0]))[0]
    flow = Flow(sharded, queues)
    with flow.running():
        cluster.failover(replica)
    summary = flow.check()
    report(flow, "CLUSTER FAILOVER", summary)
    assert summary.lost_puts == [] and summary.not_done == {} and summary.unexplained == []
    assert set(summary.duplicates) <= {"unknown"}
    assert summary.unacked.get("not durable", 0) == 0
    assert primary_of(cluster, sharded, queues[0]) is replica
    assert_clean(sharded)


def test_migrating_a_busy_shards_slot_loses_and_repeats_nothing(
    cluster: LocalCluster, sharded: ShardedClient
) -> None:
    """SETSLOT/MIGRATE of the slot of a shard whose queue is being put to and drained:
    engine calls to it wait out the move (ASK), then follow MOVED; every job runs once."""
    queues = queues_on_each_primary(sharded, cluster)
    busy = queues[2]
    source = primary_of(cluster, sharded, busy)
    target = next(n for n in cluster.primaries() if n is not source)
    slot = cluster.slot_for_key(f"ql:{{{sharded.shard_of(busy)}}}:")
    flow = Flow(sharded, queues)
    try:
        with flow.running():
            moved = cluster.migrate_slot(slot, target, batch=50)
        summary = flow.check()
        report(flow, f"slot migration ({moved} keys moved)", summary)
        assert moved > 0 and primary_of(cluster, sharded, busy) is target
        assert summary.lost_puts == [] and summary.not_done == {}
        assert summary.unexplained == [] and summary.duplicates == {} and summary.unacked == {}
        assert sum(len(runs) for runs in flow.runs.values()) == flow.total
        assert sharded.transport.stats["moved"] >= 1
        assert_clean(sharded)
    finally:
        # The session cluster is shared: later tests expect the slot map `heal` leaves.
        cluster.migrate_slot(slot, source)
