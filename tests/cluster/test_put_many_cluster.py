"""`Queue.put_many` on a shard of a cluster: chunk after chunk, stopping at a refused one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from redis.cluster import RedisCluster

from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import InvalidArgument
from testservers.cluster import LocalCluster

__all__: list[str] = []


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """Three shards; queue a on s1."""
    client = ShardedClient(rc, shards=3, worker_name="w1")
    client.placement.record("a", 1)
    yield client
    client.close()


def test_put_many_runs_every_chunk_in_order(sharded: ShardedClient, rc: RedisCluster) -> None:
    queue = sharded.for_queue("a").queues["a"]
    jids = queue.put_many([{"klass": "K", "data": {"i": i}} for i in range(1201)])
    tag = sharded.tags[1]
    assert rc.zrevrange(f"ql:{{{tag}}}:q:a-work", 0, -1) == jids
    assert len(set(jids)) == 1201


def test_put_many_refused_middle_chunk_puts_only_the_chunks_before(
    sharded: ShardedClient, rc: RedisCluster
) -> None:
    """Chunk 2 of 3 is refused by the engine: chunk 1 is put, chunks 2 and 3 are not."""
    queue = sharded.for_queue("a").queues["a"]
    queue.recur("K", {}, 60, jid="rec")
    jobs: list[dict[str, Any]] = [{"klass": "K", "data": {}, "jid": f"j{i}"} for i in range(1500)]
    jobs[700]["jid"] = "rec-1"
    with pytest.raises(InvalidArgument, match="job 201: Job rec-1 collides with recurring job"):
        queue.put_many(jobs)
    tag = sharded.tags[1]
    assert rc.zrevrange(f"ql:{{{tag}}}:q:a-work", 0, -1) == [f"j{i}" for i in range(500)]
    assert not rc.exists(f"ql:{{{tag}}}:j:j500") and not rc.exists(f"ql:{{{tag}}}:j:j1499")
