"""What a queue move writes on the target reaches the engine's known-empty marks there
(pop.lua, docs/engine.md): a copy into a queue the target's engine knows to be empty is
handed out by the next reserve, a scheduled copy at its time, and a queue of the same name
in another shard on the same node keeps its own mark."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.cluster.sharded import ShardedClient
from testservers.cluster import LocalCluster

__all__: list[str] = []

Q = "mv"


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """Six shards over the three primaries."""
    client = ShardedClient(rc, shards=6, worker_name="w1")
    yield client
    client.close()


def copy(sharded: ShardedClient, shard: int, jid: str, delay: float = 0) -> None:
    """Put `jid` on `shard` as a queue move's copy round does (never replacing a live job)."""
    sharded.shard(shard).call("put", "", Q, jid, "K", "{}", delay, "priority", 1,
                              "if-absent", "live")


def reserved(sharded: ShardedClient, shard: int) -> list[str]:
    """Reserve up to 5 jobs of the queue on `shard`; return their jids."""
    jobs, _ = sharded.shard(shard).reserve([Q, "other"], count=5)
    return [job.jid for job in jobs]


def test_a_copy_into_a_queue_known_empty_on_the_target_is_reserved_at_once(
        sharded: ShardedClient) -> None:
    sharded.shard(3).queues[Q].put("K", {}, jid="first")
    assert reserved(sharded, 3) == ["first"]
    assert reserved(sharded, 3) == []  # drained: the engine now knows the queue is empty
    copy(sharded, 3, "copied")
    assert reserved(sharded, 3) == ["copied"]


def test_a_scheduled_copy_into_a_known_empty_queue_is_reserved_at_its_time(
        sharded: ShardedClient) -> None:
    assert reserved(sharded, 3) == []
    copy(sharded, 3, "later", delay=0.3)
    assert reserved(sharded, 3) == []
    time.sleep(0.4)
    assert reserved(sharded, 3) == ["later"]


def test_a_queue_of_the_same_name_in_another_shard_keeps_its_own_mark(
        sharded: ShardedClient, rc: RedisCluster) -> None:
    # Two shards one primary holds (one Lua state of the engine serves them): 6 shards on
    # 3 primaries, so some primary holds two, whichever slots earlier tests migrated.
    by_node: dict[str, list[int]] = {}
    for i in range(sharded.shards):
        node = rc.get_node_from_key(f"ql:{{{sharded.tags[i]}}}:x")
        by_node.setdefault(node.name, []).append(i)
    one, other = next(shards for shards in by_node.values() if len(shards) > 1)[:2]
    assert reserved(sharded, one) == [] and reserved(sharded, other) == []
    copy(sharded, other, "on-other")
    assert reserved(sharded, one) == []
    copy(sharded, one, "on-one")
    assert reserved(sharded, one) == ["on-one"] and reserved(sharded, other) == ["on-other"]
