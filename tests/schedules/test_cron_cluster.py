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
    """Pop queues a and b from every shard, twice; return the jids taken."""
    jids = []
    for shard in sharded.clients():
        for queue in ("a", "b"):
            for _ in range(2):
                job = shard.queues[queue].pop()
                if job is not None:
                    jids.append(job.jid)
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
