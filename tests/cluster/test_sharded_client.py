"""`Client` on one shard of a real cluster, and `ShardedClient` placing queues over shards."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import InvalidArgument
from tests.helpers import wait_until
from testservers.cluster import LocalCluster

__all__: list[str] = []


@pytest.fixture
def sharded(cluster: LocalCluster, rc: RedisCluster) -> Iterator[ShardedClient]:
    """A ShardedClient of 6 shards over the cluster (two per primary)."""
    client = ShardedClient(rc, shards=6, worker_name="w1")
    yield client
    client.close()


def queue_on_each_primary(sharded: ShardedClient, cluster: LocalCluster) -> dict[int, str]:
    """Return one queue name per primary port, pinned by placement to a shard there."""
    found: dict[int, str] = {}
    for index in range(sharded.shards):
        port = cluster.primary_for_key(f"ql:{{{sharded.tags[index]}}}:").port
        if port not in found:
            name = f"q{index}"
            sharded.placement.record(name, index)
            found[port] = name
    assert len(found) == 3
    return found


def test_a_cluster_client_needs_a_shard(rc: RedisCluster) -> None:
    with pytest.raises(InvalidArgument, match="keyspace"):
        Client(rc)


def test_one_shard_client_runs_the_whole_job_cycle(cluster: LocalCluster,
                                                   rc: RedisCluster) -> None:
    client = Client(rc, keyspace="s1", worker_name="w1")
    queue = client.queues["emails"]
    jid = queue.put("K", {"n": 1})
    job = queue.pop()
    assert job is not None and job.jid == jid and job.client is client
    assert job.complete() == "complete"
    assert client.jobs[jid].state == "complete"
    owner = cluster.primary_for_key("ql:{s1}:")
    assert owner.conn().hget(f"ql:{{s1}}:j:{jid}", "state") == "complete"
    assert client.node_redis().connection_pool.connection_kwargs["port"] == owner.port
    client.close()
    rc.ping()  # a cluster passed in stays open


def test_jobs_go_to_their_queues_shard_and_stay_there(sharded: ShardedClient,
                                                      cluster: LocalCluster) -> None:
    queues = queue_on_each_primary(sharded, cluster)
    jids = {}
    for port, name in queues.items():
        jids[port] = sharded.for_queue(name).queues[name].put("K", {"port": port})
    for port, name in queues.items():
        node = cluster.node(port)
        tag = sharded.shard_of(name)
        assert node.conn().hget(f"ql:{{{tag}}}:j:{jids[port]}", "queue") == name
        found = sharded.find_job(jids[port])
        assert found is not None and found.queue_name == name
        assert found.client is sharded.for_queue(name)
    assert sharded.find_job("nope") is None


def test_reserve_and_deferred_complete_on_each_shard(sharded: ShardedClient,
                                                     cluster: LocalCluster) -> None:
    queues = queue_on_each_primary(sharded, cluster)
    for name in queues.values():
        client = sharded.for_queue(name)
        queue = client.queues[name]
        first, second = queue.put("K", {}), queue.put("K", {})
        [job], _ = client.reserve([name])
        assert job.jid == first
        pending = client.send_complete_and_reserve(job, [name])
        state, [following], _ = pending.result()
        assert state == "complete" and following.jid == second
        assert pending.result()[0] == "complete"  # read once
        state, jobs, _ = client.complete_and_reserve(following, [name])
        assert state == "complete" and jobs == []


def test_pipelined_calls_and_find_job_of_a_recurring_job(sharded: ShardedClient,
                                                         cluster: LocalCluster) -> None:
    queues = list(queue_on_each_primary(sharded, cluster).values())
    client = sharded.for_queue(queues[0])
    replies = client.pipeline_calls(
        [("put", ("", queues[0], f"j{i}", "K", "{}", 0)) for i in range(5)])
    assert replies == [f"j{i}" for i in range(5)]
    assert [j.jid for j in client.queues[queues[0]].peek(10)] == replies
    other = sharded.for_queue(queues[2])
    rjid = other.queues[queues[2]].recur("K", {}, 60)
    found = sharded.find_job(rjid)
    assert found is not None and found.client is other


def test_events_of_a_shard_arrive_from_its_primary(sharded: ShardedClient,
                                                   cluster: LocalCluster) -> None:
    queues = list(queue_on_each_primary(sharded, cluster).values())
    client = sharded.for_queue(queues[1])
    seen: list[str] = []
    events = client.events()
    events.on("completed", lambda event: seen.append(str(event["jid"])))
    with events:
        jid = client.queues[queues[1]].put("K", {})
        assert client.track(jid)
        job = client.queues[queues[1]].pop()
        assert job is not None
        job.complete()
        deadline = time.monotonic() + 5
        while not seen and time.monotonic() < deadline:
            time.sleep(0.02)
    assert seen and set(seen) == {jid}  # the jid channel and the log channel


def test_disconnect_closes_every_connection_and_the_client_stays_usable(
        cluster: LocalCluster, rc: RedisCluster) -> None:
    observers = {node.port: node.conn() for node in cluster.primaries()}

    def ids() -> dict[int, set[str]]:
        # (a replica's replication link is no client connection of ours)
        return {port: {str(c["id"]) for c in conn.client_list() if "S" not in c["flags"]}
                for port, conn in observers.items()}

    before = ids()
    client = ShardedClient(rc, shards=6, worker_name="w1")
    queues = queue_on_each_primary(client, cluster)
    for name in queues.values():
        client.for_queue(name).queues[name].put("K", {})
    opened = {port: now - before[port] for port, now in ids().items()}
    assert all(opened.values()), opened  # a connection to every primary
    client.disconnect()

    def still() -> dict[int, set[str]]:
        return {port: opened[port] & now for port, now in ids().items()}

    # (Redis drops a closed connection at its next event loop turn)
    wait_until(lambda: not any(still().values()), timeout=5)
    for name in queues.values():  # each call opens what it needs again
        job = client.for_queue(name).queues[name].pop()
        assert job is not None and job.complete() == "complete"
    client.close()


def test_a_shard_clock_reads_time_on_its_own_primary(cluster: LocalCluster,
                                                     rc: RedisCluster) -> None:
    # A shard whose primary is not the node redis-py sends keyless commands to.
    default = rc.get_default_node().port
    tag = next(t for t in (f"s{i}" for i in range(32))
               if cluster.primary_for_key(f"ql:{{{t}}}:").port != default)
    owner = cluster.primary_for_key(f"ql:{{{tag}}}:")
    client = Client(rc, keyspace=tag, worker_name="w1")
    client.queues["q"].put("K", {})
    observers = {node.port: node.conn() for node in cluster.nodes()}
    for conn in observers.values():
        conn.config_resetstat()
    client.server_clock.reset()  # as after a minute: the next call reads TIME again
    client.queues["q"].put("K", {})
    assert client.server_clock.measurements == 2
    calls = {port: int(conn.info("commandstats").get("cmdstat_time", {}).get("calls", 0))
             for port, conn in observers.items()}
    # Once by the clock, once by the engine's call: both on the shard's primary.
    assert calls.pop(owner.port) == 2, calls
    assert not any(calls.values()), calls
    client.close()
