"""Cron schedules on a cluster: each lives in its queue's shard, one job per tick."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.cluster.sharded import ShardedClient
from tests.cluster.conftest import cluster, rc  # noqa: F401 - the cluster fixtures
from tests.schedules.conftest import Clock

__all__: list[str] = []


@pytest.fixture
def sharded(rc: RedisCluster, clock: Clock) -> Iterator[ShardedClient]:  # noqa: F811
    """Six shards; queue a on s0, queue b on s1."""
    client = ShardedClient(rc, shards=6, worker_name="w1", _clock=clock)
    client.placement.record("a", 0)
    client.placement.record("b", 1)
    yield client
    client.close()


def _pop_everywhere(sharded: ShardedClient) -> list[str]:
    """Pop (and complete) queues a and b from every shard, twice; return the jids taken."""
    jids = []
    for shard in sharded.clients():
        for queue in ("a", "b"):
            for _ in range(2):
                job = shard.queues[queue].pop()
                if job is not None:
                    jids.append(job.jid)
                    job.complete()
    return jids


def test_schedule_lives_in_its_queue_shard_and_moves_with_it(
    sharded: ShardedClient, clock: Clock
) -> None:
    clock.set("UTC", 2026, 6, 1, 0, 50)
    assert sharded.schedules.register("m", "app.M", cron="0 * * * *", queue="a") == "created"
    homes = [c.shard for c in sharded.clients() if c.call("cron.get", "m") is not None]
    assert homes == [sharded.for_queue("a").shard]
    assert sharded.schedules.register("m", "app.M", cron="0 * * * *", queue="a") == "unchanged"
    clock.set("UTC", 2026, 6, 1, 1, 0)
    assert _pop_everywhere(sharded) == ["m-1"]
    # Moved to queue b (shard s1): gone from s0, the next tick spawns there, once.
    assert sharded.schedules.register("m", "app.M", cron="0 * * * *", queue="b") == "created"
    homes = [c.shard for c in sharded.clients() if c.call("cron.get", "m") is not None]
    assert homes == [sharded.for_queue("b").shard]
    clock.set("UTC", 2026, 6, 1, 2, 0)
    assert _pop_everywhere(sharded) == ["m-2"]  # numbering goes on: no jid twice
    assert [s.name for s in sharded.schedules.all()] == ["m"]
    assert sharded.schedules.run_now("m") == "m-3"


def test_move_queue_carries_the_schedule(sharded: ShardedClient, clock: Clock) -> None:
    """Moving a queue to another shard moves its cron schedule, numbering kept."""
    from django_qless.core.cluster.queue_move import QueueMove

    clock.set("UTC", 2026, 6, 1, 0, 50)
    sharded.schedules.register("m", "app.M", cron="0 * * * *", queue="a")
    sharded.for_queue("a").queues["a"].recur("app.R", {}, 600, jid="plain")  # moves too
    clock.set("UTC", 2026, 6, 1, 1, 0)
    assert sorted(_pop_everywhere(sharded)) == ["m-1", "plain-1"]
    QueueMove(sharded, "a", 2, settle=0, poll=0.01, drain_timeout=5).run()
    target = sharded.shard(2)
    assert sharded.for_queue("a") is target
    state = target.schedules.get("m")
    assert state is not None and state.count == 1 and state.queue == "a"
    assert [c.shard for c in sharded.clients() if c.call("cron.get", "m")] == [target.shard]
    clock.set("UTC", 2026, 6, 1, 2, 0)
    assert sorted(_pop_everywhere(sharded)) == ["m-2", "plain-2"]
