"""Flows on a Redis Cluster: a flow within one shard runs; one across shards is refused,
naming the shards, before anything is written."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.flows import RESULT_KEY, Flows, Step, chain, chord, group, received
from testservers.cluster import LocalCluster


@pytest.fixture
def sharded(redis_cluster: LocalCluster) -> Iterator[ShardedClient]:
    """Six shards of the session's Redis cluster; queues a and a2 on s0, b on s1."""
    redis_cluster.heal()
    redis_cluster.flush()
    rc = redis_cluster.client()
    client = ShardedClient(rc, shards=6, worker_name="w1")
    client.placement.record("a", 0)
    client.placement.record("a2", 0)
    client.placement.record("b", 1)
    yield client
    client.close()
    rc.close()


def test_a_flow_inside_one_shard_runs(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chord(group(Step("k", {"n": 1}, "a"), Step("k", {"n": 2}, "a2")),
                              Step("k", {"n": 0}, "a", receive=True)))
    shard = sharded.for_queue("a")
    for _ in range(2):
        for name in ("a", "a2"):
            for job in shard.queues[name].pop(10):
                job.data[RESULT_KEY] = job.data["n"] + sum(sum(v) for v in received(job))
                job.complete()
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == 3
    assert shard.flows.get(flow_id) == state  # a shard's client finds it too


def test_a_flow_across_shards_is_refused_naming_them(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    tag_a, tag_b = sharded.for_queue("a").shard, sharded.for_queue("b").shard
    with pytest.raises(InvalidArgument) as caught:
        flows.put(chain(Step("k", {}, "a"), Step("k", {}, "b")))
    message = str(caught.value)
    assert f"shard {tag_a}: a" in message and f"shard {tag_b}: b" in message
    assert "must share one shard" in message
    assert all(len(c.queues[q]) == 0 for c in sharded.clients() for q in ("a", "b"))
