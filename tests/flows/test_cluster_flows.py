"""Flows on a Redis Cluster: inside one shard as on one server; across shards through gates
(a member waiting on a parent of another shard is released right after that parent
completes, or by the reaper's sweep if its completer died in between)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.flows import (
    RESULT_KEY,
    Flows,
    Step,
    chain,
    chord,
    group,
    member_ids,
    received,
)
from django_qless.core.flows.gates import GATES_QUEUE, sweep_gates
from testservers.cluster import LocalCluster


@pytest.fixture
def sharded(redis_cluster: LocalCluster) -> Iterator[ShardedClient]:
    """Six shards of the session's Redis cluster; queues a, a2 on s0, b on s1, c on s2."""
    redis_cluster.heal()
    redis_cluster.flush()
    rc = redis_cluster.client()
    client = ShardedClient(rc, shards=6, worker_name="w1")
    for queue, shard in (("a", 0), ("a2", 0), ("b", 1), ("c", 2)):
        client.placement.record(queue, shard)
    yield client
    client.close()
    rc.close()


def run(job: Any, fail: bool = False) -> None:
    """Complete `job` with its "n" plus what it received (or fail it)."""
    if fail:
        job.fail("flows.Boom", "boom")
        return
    value = job.data.get("n", 0)
    for item in received(job):
        value += sum(item) if isinstance(item, list) else item
    job.data[RESULT_KEY] = value
    job.complete()


def pop(sharded: ShardedClient, queue: str) -> list[Any]:
    return sharded.for_queue(queue).queues[queue].pop(10)


def states(flows: Flows, flow_id: str) -> list[str | None]:
    state = flows.get(flow_id)
    assert state is not None
    return [m.state for m in state.members]


def gates_left(sharded: ShardedClient) -> int:
    return sum(len(c.queues[GATES_QUEUE].jobs.scheduled(0, 100)) for c in sharded.clients())


def test_a_flow_inside_one_shard_runs_without_gates(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chord(group(Step("k", {"n": 1}, "a"), Step("k", {"n": 2}, "a2")),
                              Step("k", {"n": 0}, "a", receive=True)))
    shard = sharded.for_queue("a")
    assert gates_left(sharded) == 0
    for _ in range(2):
        for name in ("a", "a2"):
            for job in shard.queues[name].pop(10):
                run(job)
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == 3
    assert shard.flows.get(flow_id) == state  # a shard's client finds it too


def test_a_chain_across_shards_runs_in_order_passing_results(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chain(Step("k", {"n": 1}, "a"), Step("k", {"n": 10}, "b", receive=True),
                              Step("k", {"n": 100}, "a", receive=True)))
    a, b, c = member_ids(flow_id)
    assert states(flows, flow_id) == ["waiting", "depends", "depends"]
    assert gates_left(sharded) == 2  # b waits behind one in s1, c behind one in s0
    assert pop(sharded, "b") == []  # b is held back until a completes
    [job] = pop(sharded, "a")
    run(job)  # completing a releases b, in the other shard, at once
    assert states(flows, flow_id) == ["complete", "waiting", "depends"]
    assert pop(sharded, "a") == []
    [job] = pop(sharded, "b")
    assert received(job) == [1]  # a's result, read from its shard
    run(job)
    [job] = pop(sharded, "a")
    assert job.jid == c and received(job) == [11]
    run(job)
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == 111
    assert [m.queue for m in state.members] == ["a", "b", "a"]
    assert gates_left(sharded) == 0


def test_a_chord_callback_in_a_third_shard_receives_every_result(
        sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chord(
        group(Step("k", {"n": 1}, "a"), Step("k", {"n": 2}, "b"), Step("k", {"n": 4}, "a2")),
        Step("k", {"n": 0}, "c", receive=True)))
    for queue in ("a", "b"):
        for job in pop(sharded, queue):
            run(job)
    assert pop(sharded, "c") == []  # a2 has not run yet
    [job] = pop(sharded, "a2")
    run(job)
    [callback] = pop(sharded, "c")
    assert received(callback) == [[1, 2, 4]]
    run(callback)
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == 7


def test_a_failed_member_blocks_the_callback_and_retry_resumes(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chord(group(Step("k", {"n": 1}, "a"), Step("k", {"n": 2}, "b")),
                              Step("k", {"n": 0}, "a", receive=True)))
    [first] = pop(sharded, "a")
    run(first)
    [bad] = pop(sharded, "b")
    run(bad, fail=True)
    state = flows.get(flow_id)
    assert state is not None and state.status == f"failed at {bad.jid}"
    assert [m.state for m in state.members] == ["complete", "failed", "depends"]
    assert pop(sharded, "a") == []
    assert flows.retry(flow_id) == [bad.jid]
    [again] = pop(sharded, "b")
    run(again)
    [callback] = pop(sharded, "a")
    assert received(callback) == [[1, 2]]


def test_cancel_across_shards_takes_members_and_gates(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(chain(Step("k", {"n": 1}, "a"), Step("k", {}, "b"),
                              group(Step("k", {}, "a"), Step("k", {}, "c"))))
    [job] = pop(sharded, "a")
    run(job)
    canceled = flows.cancel(flow_id)
    assert sorted(canceled) == sorted(member_ids(flow_id)[1:])
    assert states(flows, flow_id) == ["complete", None, None, None]
    assert gates_left(sharded) == 0
    assert all(pop(sharded, q) == [] for q in ("a", "b", "c"))


def test_the_sweep_releases_a_member_its_completer_left_held_exactly_once(
        sharded: ShardedClient) -> None:
    """A parent completed by the engine with nobody opening its gate (what a worker killed
    right after its complete leaves behind): the sweep releases the member, once."""
    flows = Flows(sharded)
    flow_id = flows.put(chain(Step("k", {"n": 1}, "a"), Step("k", {}, "b", receive=True)))
    [job] = pop(sharded, "a")
    job.data[RESULT_KEY] = 5
    shard: Client = sharded.for_queue("a")
    shard.call("complete", job.jid, "w1", "a", job._data_text(), "token", job.attempt_token)
    assert states(flows, flow_id) == ["complete", "depends"]
    assert sweep_gates(sharded) == [member_ids(flow_id)[1]]
    assert sweep_gates(sharded) == []  # nothing left to open
    [child] = pop(sharded, "b")
    assert received(child) == [5]
    run(child)
    assert sweep_gates(sharded) == [] and pop(sharded, "b") == []
    found = sharded.find_job(child.jid)
    assert found is not None
    assert [e["what"] for e in found.history].count("popped") == 1
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete"


def test_a_group_over_two_shards_needs_no_gate(sharded: ShardedClient) -> None:
    flows = Flows(sharded)
    flow_id = flows.put(group(Step("k", {"n": 1}, "a"), Step("k", {"n": 2}, "b")))
    assert gates_left(sharded) == 0
    assert states(flows, flow_id) == ["waiting", "waiting"]
    for queue in ("a", "b"):
        [job] = pop(sharded, queue)
        run(job)
    state = flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == [1, 2]
