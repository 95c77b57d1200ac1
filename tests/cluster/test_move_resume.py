"""A queue move resumed after its switch waits only what is left of `settle`
(core/queue_move.py; the switch time is noted with the placement, core/placement.py)."""

from __future__ import annotations

import pytest

from django_qless.core.cluster.queue_move import MoveProgress, QueueMove
from django_qless.core.cluster.sharded import ShardedClient
from tests.cluster import test_queue_move
from tests.cluster.test_queue_move import LateProducer, Q, left_on
from tests.helpers import wait_until
from testservers.cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

sharded = test_queue_move.sharded  # the same fixture: six shards, mv on s0


def crash_after_the_switch(sharded: ShardedClient, to: int, settle: float) -> None:
    """Run a move of mv from s0 up to its switch, then stop there (a crashed mover)."""
    move = QueueMove(sharded, Q, to, settle=settle, poll=0.05, drain_timeout=5)
    sharded.placement.mark_moving(Q, to)
    move.fence(sharded.tags[0])
    move.copy_rounds(sharded.tags[0], MoveProgress(Q, sharded.tags[0], sharded.tags[to]))
    assert sharded.placement.switch(Q, 0, to)


def test_a_move_resumed_later_than_settle_after_the_switch_does_not_wait_again(
        sharded: ShardedClient) -> None:
    source, target = sharded.shard(0), sharded.shard(2)
    early = [source.queues[Q].put("K", {"n": n}) for n in range(5)]
    crash_after_the_switch(sharded, 2, settle=0.3)
    # Put on the source after the switch, as by a client whose placement predates it.
    late = [source.queues[Q].put("K", {"late": n}) for n in range(2)]
    placement = sharded.placement
    wait_until(lambda: (placement.switched_since(Q, 2) or 0) > 0.3, 10)
    # A repeated switch keeps the time of the first (the resumed move may repeat it).
    assert placement.switch(Q, 0, 2)
    since = placement.switched_since(Q, 2)
    assert since is not None and since > 0.3
    assert placement.switched_since(Q, 1) is None  # noted for s2 only
    [progress] = QueueMove(sharded, Q, 2, settle=0.3, poll=0.05, drain_timeout=5).run()
    # The switch was noted longer ago than `settle`: no wait before the drain.
    assert progress.waited == 0.0
    assert progress.step == "done" and progress.copied == len(late)
    assert sorted(target.queues[Q].jobs.waiting(0, 100)) == sorted(early + late)
    assert left_on(sharded, sharded.tags[0]) == {} and not source.queues[Q].paused
    assert placement.switched_since(Q, 2) is None  # forgotten once the move is over


def test_a_move_resumed_right_after_the_switch_waits_what_is_left_of_settle(
        cluster: LocalCluster, sharded: ShardedClient) -> None:
    """A client whose cached placement predates the switch puts on the source until its
    cache runs out: the resumed move still waits (what is left of `settle` since the
    noted switch), so those jobs are drained to the target, none stranded on the source."""
    settle = 2.0
    source, target = sharded.shard(0), sharded.shard(2)
    client = cluster.client()
    late = ShardedClient(client, shards=6, worker_name="late")
    late.placement.cache_seconds = 1.2
    try:
        assert late.shard_of(Q) == sharded.tags[0]  # cached: s0 for the next 1.2 s
        early = [source.queues[Q].put("K", {}) for _ in range(3)]
        crash_after_the_switch(sharded, 2, settle=settle)
        producer = LateProducer(late, sharded.tags[2])
        producer.start()
        # Resumed half a second after the switch (the producer still puts on the source).
        wait_until(lambda: (sharded.placement.switched_since(Q, 2) or 0) > 0.5, 10)
        [progress] = QueueMove(sharded, Q, 2, settle=settle, poll=0.05,
                               drain_timeout=5).run()
        producer.join(10)
        assert not producer.errors, producer.errors
        put = producer.put
        # It waited, but not `settle` again: what was left of it after the noted switch.
        assert 0.0 < progress.waited < settle - 0.5
        assert len(put) > 5  # (puts went on for the 1.2 s of its cache)
        assert left_on(sharded, sharded.tags[0]) == {}
        assert progress.step == "done" and progress.copied == len(put) - 1
        assert sorted(target.queues[Q].jobs.waiting(0, 500)) == sorted(early + put)
    finally:
        late.close()
        client.close()


def test_a_move_without_a_noted_switch_waits_all_of_settle(sharded: ShardedClient) -> None:
    """A switch noted by an older version (no time) or its note lost: the resumed move
    cannot tell when it happened and waits all of `settle`."""
    source = sharded.shard(0)
    source.queues[Q].put("K", {})
    crash_after_the_switch(sharded, 2, settle=2.0)
    sharded.placement.forget_switch(Q)
    [progress] = QueueMove(sharded, Q, 2, settle=2.0, poll=0.05, drain_timeout=5).run()
    assert progress.waited > 0.0 and progress.step == "done"
    assert left_on(sharded, sharded.tags[0]) == {}
