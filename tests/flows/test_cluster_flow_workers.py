"""Flows across shards run by real workers (`python -m django_qless.core.workers --cluster`):
each member runs once, in order, and receives what it follows, whichever shard it is in."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.flows import Flows, FlowState, Step, chain, chord, group, member_ids
from django_qless.core.flows.gates import GATES_QUEUE
from tests.helpers import WorkerProcess, wait_until
from testservers.cluster import LocalCluster

pytestmark = pytest.mark.timeout(120)

SHARDS = 6
ADD = "tests.flows.shard_jobs.add"


@pytest.fixture
def sharded(redis_cluster: LocalCluster) -> Iterator[ShardedClient]:
    """Queues a, a2 on s0, b on s1, c on s2 of six shards (the workers agree on six)."""
    redis_cluster.heal()
    redis_cluster.flush()
    rc = redis_cluster.client()
    client = ShardedClient(rc, shards=SHARDS, worker_name="test")
    for queue, shard in (("a", 0), ("a2", 0), ("b", 1), ("c", 2)):
        client.placement.record(queue, shard)
    yield client
    client.close()
    rc.close()


@pytest.fixture
def workers(redis_cluster: LocalCluster, tmp_path: Path) -> Iterator[Any]:
    """Start workers serving a, a2, b and c over the cluster's shards; kill them at the end."""
    started: list[WorkerProcess] = []

    def start() -> WorkerProcess:
        urls = ",".join(f"redis://{n.address}" for n in redis_cluster.primaries())
        worker = WorkerProcess(f"redis://{redis_cluster.primaries()[0].address}",
                               ["--cluster", urls, "--shards", str(SHARDS), "-n", "1",
                                "a,a2,b,c"], tmp_path, jobs_module="tests.flows.shard_jobs",
                               wait_timeout=60)
        started.append(worker)
        worker.wait_children(1, 30)
        return worker

    yield start
    for worker in started:
        worker.kill_all()


def step(queue: str, log: Path, n: int = 0, *, receive: bool = True, **extra: Any) -> Step:
    return Step(ADD, {"n": n, "log": str(log), **extra}, queue, receive=receive)


def finished(flows: Flows, flow_id: str) -> FlowState | None:
    state = flows.get(flow_id)
    return state if state is not None and state.status != "running" else None


def runs(log: Path) -> list[str]:
    return log.read_text().split() if log.exists() else []


def test_a_chain_and_a_chord_across_shards_run_once_each_in_order(
        sharded: ShardedClient, workers: Any, tmp_path: Path) -> None:
    log = tmp_path / "runs"
    flows = Flows(sharded)
    chained = flows.put(chain(step("a", log, 1, receive=False), step("b", log, 10),
                              step("a", log, 100)))
    chorded = flows.put(chord(group(step("a", log, 1), step("b", log, 2), step("a2", log, 4)),
                              step("c", log, 0)))
    workers()
    for flow_id, result in ((chained, 111), (chorded, 7)):
        state = wait_until(lambda f=flow_id: finished(flows, f), 60)
        assert state.status == "complete" and state.result() == result
    ran = runs(log)
    assert sorted(ran) == sorted(member_ids(chained) + member_ids(chorded))  # once each
    a, b, c = member_ids(chained)
    assert ran.index(a) < ran.index(b) < ran.index(c)
    assert ran.index(member_ids(chorded)[3]) > max(ran.index(j) for j in member_ids(chorded)[:3])
    assert all(len(s.queues[GATES_QUEUE].jobs.scheduled()) == 0 for s in sharded.clients())


def test_a_failed_member_holds_the_callback_until_retried(
        sharded: ShardedClient, workers: Any, tmp_path: Path) -> None:
    log, flag = tmp_path / "runs", tmp_path / "fail"
    flag.touch()
    flows = Flows(sharded)
    flow_id = flows.put(chord(group(step("a", log, 1), step("b", log, 2, fail_if=str(flag))),
                              step("a", log, 0)))
    workers()
    state = wait_until(lambda: finished(flows, flow_id), 60)
    member = member_ids(flow_id)[1]
    assert state.status == f"failed at {member}"
    assert [m.state for m in state.members] == ["complete", "failed", "depends"]
    flag.unlink()
    assert flows.retry(flow_id) == [member]
    state = wait_until(lambda: finished(flows, flow_id), 60)
    assert state.status == "complete" and state.result() == 3
    assert runs(log).count(member_ids(flow_id)[2]) == 1


def test_a_worker_killed_after_completing_a_parent_leaves_the_child_to_the_sweep(
        sharded: ShardedClient, workers: Any, tmp_path: Path) -> None:
    """The parent's body completes it through the engine and SIGKILLs its worker before any
    release; a new worker's reaper sweeps the gate open and the child runs exactly once."""
    log = tmp_path / "runs"
    flows = Flows(sharded)
    flow_id = flows.put(chain(step("a", log, 5, die_after_complete=True), step("b", log, 1)))
    parent, child = member_ids(flow_id)
    first = workers()
    assert first.proc.wait(30) == -signal.SIGKILL
    state = flows.get(flow_id)
    assert state is not None and [m.state for m in state.members] == ["complete", "depends"]
    workers()
    state = wait_until(lambda: finished(flows, flow_id), 60)
    assert state.status == "complete" and state.result() == 6
    assert runs(log) == [parent, child]
