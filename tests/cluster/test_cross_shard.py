"""What works across the shards of a ShardedClient: completing into another shard's queue,
and the refusals of dependencies and named throttles that live in another shard."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import DependencyError, InvalidArgument
from testservers.cluster import LocalCluster

__all__: list[str] = []


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """Six shards; queue a (and a2) on s0, queue b on s1."""
    client = ShardedClient(rc, shards=6, worker_name="w1")
    client.placement.record("a", 0)
    client.placement.record("a2", 0)
    client.placement.record("b", 1)
    yield client
    client.close()


def keys_of(rc: RedisCluster, tag: str, jid: str) -> dict[str, str]:
    """Return job `jid`'s hash in shard `tag` (read straight from Redis)."""
    return dict(rc.hgetall(f"ql:{{{tag}}}:j:{jid}"))


def test_shard_clients_know_their_deployment(sharded: ShardedClient, rc: RedisCluster) -> None:
    assert all(client.router is sharded for client in sharded.clients())
    alone = Client(rc, keyspace="s9")
    assert alone.router is None
    alone.close()


def target_job_remaining(sharded: ShardedClient, jid: str) -> int:
    """The moved job's `remaining` as the engine reports it."""
    return int(sharded.for_queue("b").call_json("get", jid)["remaining"])


def test_complete_into_a_queue_of_another_shard(sharded: ShardedClient,
                                                rc: RedisCluster) -> None:
    s0, s1 = sharded.tags[0], sharded.tags[1]
    source = sharded.for_queue("a")
    jid = source.queues["a"].put("K", {"n": 1}, priority=7, tags=["x", "y"], retries=3)
    assert source.track(jid)
    job = source.queues["a"].pop()
    assert job is not None
    job.data["n"] = 2
    assert job.complete(next="b") == "waiting"
    assert job.state == "complete"
    moved = keys_of(rc, s1, jid)
    assert moved["state"] == "waiting" and moved["queue"] == "b"
    assert (moved["klass"], moved["data"], moved["priority"]) == ("K", '{"n":2}', "7")
    # (a shard writes lean records: `remaining` equal to `retries` is left out)
    assert moved["tags"] == '["x","y"]' and moved["retries"] == "3" and "remaining" not in moved
    assert target_job_remaining(sharded, jid) == 3
    assert moved["tracked"] == "1"
    assert keys_of(rc, s0, jid)["state"] == "complete"
    target = sharded.for_queue("b")
    nxt = target.queues["b"].pop()
    assert nxt is not None and nxt.jid == jid and nxt.client is target
    assert nxt.complete() == "complete"


def test_a_hop_keeps_the_history_and_resets_the_retry_budget(sharded: ShardedClient) -> None:
    """Into another shard as into a queue of the same shard: the history goes on (the old
    entries, `done`, the put into the next queue) and the retry budget starts afresh."""
    source, target = sharded.for_queue("a"), sharded.for_queue("b")
    histories = {}
    for nxt, shard in (("a2", source), ("b", target)):
        jid = source.queues["a"].put("K", {}, retries=3)
        first = source.queues["a"].pop()
        assert first is not None and first.jid == jid and first.retry() == 2
        job = source.queues["a"].pop()
        assert job is not None and job.jid == jid
        job.log("checked", {"step": 2})
        assert job.complete(next=nxt) == "waiting"
        moved = shard.jobs[jid]
        assert moved is not None and moved.queue_name == nxt
        assert (moved.original_retries, moved.retries) == (3, 3)
        histories[nxt] = moved.history
    same, across = histories["a2"], histories["b"]
    assert [e["what"] for e in across] == [e["what"] for e in same] == [
        "put", "popped", "retry", "popped", "checked", "done", "put"]
    assert across[-1]["q"] == "b" and across[4]["step"] == 2
    assert across[2]["remaining"] == 2
    assert across[-2]["when"] <= across[-1]["when"]


def test_a_delayed_hop_is_scheduled_there(sharded: ShardedClient, rc: RedisCluster) -> None:
    source = sharded.for_queue("a")
    jid = source.queues["a"].put("K", {})
    job = source.queues["a"].pop()
    assert job is not None and job.complete(next="b", delay=60) == "scheduled"
    assert keys_of(rc, sharded.tags[1], jid)["state"] == "scheduled"


def test_a_repeated_hop_never_replaces_the_copy(sharded: ShardedClient,
                                                rc: RedisCluster) -> None:
    """A crash between the put there and the complete here: the job runs again here (its
    lease expired) and completes into b again, while b's copy is already running."""
    source, target = sharded.for_queue("a"), sharded.for_queue("b")
    jid = source.queues["a"].put("K", {"n": 1})
    job = source.queues["a"].pop()
    assert job is not None
    target.call("put", *job.put_args("b"), "if-absent", "live")  # the first half, then a crash
    running = target.queues["b"].pop()
    assert running is not None and running.jid == jid
    assert job.complete(next="b") == "waiting"  # the rerun's hop
    copy = keys_of(rc, sharded.tags[1], jid)
    assert copy["state"] == "running" and copy["worker"] == "w1"
    assert keys_of(rc, sharded.tags[0], jid)["state"] == "complete"
    assert running.complete() == "complete"


def test_a_hop_back_replaces_the_completed_copy_of_an_earlier_pass(
        sharded: ShardedClient, rc: RedisCluster) -> None:
    """a (s0) -> b (s1) -> a2 (s0): s0 still holds the job's completed first pass."""
    source, target = sharded.for_queue("a"), sharded.for_queue("b")
    jid = source.queues["a"].put("K", {})
    first = source.queues["a"].pop()
    assert first is not None and first.complete(next="b") == "waiting"
    second = target.queues["b"].pop()
    assert second is not None and second.complete(next="a2") == "waiting"
    third = source.queues["a2"].pop()
    assert third is not None and third.jid == jid
    assert third.complete() == "complete"


def test_the_same_shard_next_is_one_engine_call(sharded: ShardedClient,
                                                rc: RedisCluster) -> None:
    source = sharded.for_queue("a")
    jid = source.queues["a"].put("K", {})
    job = source.queues["a"].pop()
    assert job is not None and job.complete(next="a2") == "waiting"
    here = keys_of(rc, sharded.tags[0], jid)
    assert here["state"] == "waiting" and here["queue"] == "a2"
    assert all(not keys_of(rc, tag, jid) for tag in sharded.tags[1:])


def test_a_dependency_in_another_shard_is_refused(sharded: ShardedClient,
                                                  rc: RedisCluster) -> None:
    s0, s1 = sharded.tags[0], sharded.tags[1]
    dep = sharded.for_queue("a").queues["a"].put("K", {})
    target = sharded.for_queue("b")
    with pytest.raises(InvalidArgument,
                       match=f"dependency {dep} is in shard {s0}, but queue 'b' is in shard "
                             f"{s1}: a job and the jobs it depends on must share a shard"):
        target.queues["b"].put("K", {}, jid="child", depends=[dep])
    assert not keys_of(rc, s1, "child")
    with pytest.raises(InvalidArgument, match=f"dependency {dep} is in shard {s0}"):
        target.queues["b"].put_many([{"klass": "K", "data": {}, "depends": [dep]}])
    with pytest.raises(DependencyError, match="no such dependency: nowhere"):
        target.queues["b"].put("K", {}, depends=["nowhere"])  # today's rule
    local = target.queues["b"].put("K", {})
    assert target.queues["b"].put("K", {}, jid="c2", depends=[local]) == "c2"
    with pytest.raises(InvalidArgument, match=f"dependency {dep} is in shard {s0}"):
        target.jobs["c2"].depend(dep)  # type: ignore[union-attr]


def test_a_hop_with_a_dependency_elsewhere_is_refused_before_anything(
        sharded: ShardedClient, rc: RedisCluster) -> None:
    source = sharded.for_queue("a")
    dep = source.queues["a"].put("K", {})
    jid = source.queues["a"].put("K", {}, priority=1)
    job = source.queues["a"].pop()
    assert job is not None and job.jid == jid
    with pytest.raises(InvalidArgument, match=f"dependency {dep} is in shard"):
        job.complete(next="b", depends=[dep])
    assert keys_of(rc, sharded.tags[0], jid)["state"] == "running"
    assert not keys_of(rc, sharded.tags[1], jid)
    local = sharded.for_queue("b").queues["b"].put("K", {})
    assert job.complete(next="b", depends=[local, "gone"]) == "depends"
    assert keys_of(rc, sharded.tags[1], jid)["state"] == "depends"


def test_a_named_throttle_lives_in_one_shard(sharded: ShardedClient, rc: RedisCluster) -> None:
    s0, s1 = sharded.tags[0], sharded.tags[1]
    a = sharded.for_queue("a").queues["a"]
    first = a.put("K", {}, throttles=["api"])  # first use: api's home is a's shard
    second = a.put("K", {}, throttles=["api"])
    assert rc.hget(f"ql:{{{s0}}}:throttle-homes", "api") == s0
    with pytest.raises(InvalidArgument,
                       match=f"throttle 'api' lives in shard {s0}, but queue 'b' is in shard "
                             f"{s1}"):
        sharded.for_queue("b").queues["b"].put("K", {}, jid="refused", throttles=["api"])
    assert not keys_of(rc, s1, "refused")
    with pytest.raises(InvalidArgument, match="throttle 'api' lives in shard"):
        sharded.for_queue("b").queues["b"].recur("K", {}, 60, throttles=["api"])
    throttle = sharded.throttle("api")
    assert throttle.client is sharded.for_queue("a")
    throttle.set(1)
    popped = a.pop(5)
    assert [j.jid for j in popped] == [first]  # capped at one, in its home shard
    assert throttle.locks() == [first]
    # A job carrying the throttle cannot hop to a queue of another shard either.
    with pytest.raises(InvalidArgument, match="throttle 'api' lives in shard"):
        popped[0].complete(next="b")
    assert second in a.jobs.throttled() + a.jobs.waiting()


def test_a_throttle_home_is_named_or_chosen_with_a_queue(cluster: LocalCluster,
                                                          rc: RedisCluster) -> None:
    sharded = ShardedClient(rc, shards=6, throttles={"mail": 1})
    try:
        sharded.placement.record("b", 1)
        assert sharded.throttle("mail").client is sharded.shard(1)
        assert sharded.for_queue("b").queues["b"].put("K", {}, throttles=["mail"])
        with pytest.raises(InvalidArgument, match="throttle 'fresh' has no home shard yet"):
            sharded.throttle("fresh")
        assert sharded.throttle("fresh", queue="b").client is sharded.shard(1)
        assert sharded.throttle("fresh").client is sharded.shard(1)
    finally:
        sharded.close()


def test_a_bare_string_is_still_refused_on_a_shard(sharded: ShardedClient) -> None:
    queue = sharded.for_queue("b").queues["b"]
    with pytest.raises(InvalidArgument, match="depends must be a list of strings"):
        queue.put("K", {}, depends="abc")
    with pytest.raises(InvalidArgument, match="throttles must be a list of strings"):
        queue.put("K", {}, throttles="api")


def test_a_job_is_not_moved_into_another_shards_queue(sharded: ShardedClient,
                                                      rc: RedisCluster) -> None:
    source = sharded.for_queue("a")
    jid = source.queues["a"].put("K", {})
    job = source.jobs[jid]
    with pytest.raises(InvalidArgument, match=f"queue 'b' is in shard {sharded.tags[1]}, job "
                                              f"{jid} in shard {sharded.tags[0]}"):
        job.move("b")
    assert keys_of(rc, sharded.tags[0], jid)["queue"] == "a"
    assert job.move("a2") == jid  # within the shard as before
