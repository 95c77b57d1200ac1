"""Flows from the core: put in one round trip, run by popping in dependency order, read,
retried and canceled on a real Redis."""

from __future__ import annotations

from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.flows import (
    FLOW_KEY,
    RESULT_KEY,
    Step,
    chain,
    chord,
    group,
    received,
)


def step(name: str, *, queue: str = "q", receive: bool = True, **data: Any) -> Step:
    return Step(f"tests.flows.{name}", data, queue, receive=receive)


def run_ready(client: Client, queues: tuple[str, ...] = ("q",), fail: str = "") -> list[str]:
    """Pop everything ready; each job's result is its data's "n" plus what it received."""
    ran = []
    for name in queues:
        for job in client.queues[name].pop(100):
            if fail and job.klass_name.endswith(fail):
                job.fail("flows.Boom", "boom")
            else:
                inputs = received(job)
                value = job.data.get("n", 0)
                for item in inputs:
                    value += sum(item) if isinstance(item, list) else item
                job.data[RESULT_KEY] = value
                job.complete()
            ran.append(job.jid)
    return ran


def drain(client: Client, queues: tuple[str, ...] = ("q",), fail: str = "") -> None:
    while run_ready(client, queues, fail):
        pass


def test_chain_passes_each_result_to_the_next_step(qless_client: Client) -> None:
    flow_id = qless_client.flows.put(chain(step("a", n=1), step("b", n=10), step("c", n=100)))
    state = qless_client.flows.get(flow_id)
    assert state is not None and [m.state for m in state.members] == [
        "waiting", "depends", "depends"]
    assert state.members[1].parents == (f"{flow_id}-0",)
    assert run_ready(qless_client) == [f"{flow_id}-0"]  # only the first is ready
    drain(qless_client)
    state = qless_client.flows.get(flow_id)
    assert state is not None and state.status == "complete"
    assert [m.result for m in state.members] == [1, 11, 111]
    assert {m.queue for m in state.members} == {"q"}  # complete jobs say where they ran
    assert state.result() == 111


def test_chord_callback_receives_every_member_result(qless_client: Client) -> None:
    flow = chord(group(step("a", n=1), step("b", n=2), chain(step("c", n=3), step("d", n=4))),
                 step("total", n=0))
    flow_id = qless_client.flows.put(flow)
    drain(qless_client)
    state = qless_client.flows.get(flow_id)
    assert state is not None and state.status == "complete"
    last = state.members[-1]
    job = qless_client.jobs[last.jid]
    assert job.data[FLOW_KEY]["gather"] is True
    assert len(last.parents) == 3  # a, b and d (the end of the nested chain)
    assert last.result == 1 + 2 + (3 + 4)


def test_a_flow_ending_in_a_group_results_in_a_list(qless_client: Client) -> None:
    flow_id = qless_client.flows.put(chain(step("a", n=1), group(step("b"), step("c", n=5))))
    drain(qless_client)
    state = qless_client.flows.get(flow_id)
    assert state is not None and state.result() == [1, 6]


def test_failure_stops_the_flow_and_retry_resumes_it(qless_client: Client) -> None:
    flow_id = qless_client.flows.put(chain(step("a", n=1), step("bad", n=2), step("c", n=3)))
    drain(qless_client, fail="bad")
    state = qless_client.flows.get(flow_id)
    assert state is not None
    assert state.status == f"failed at {flow_id}-1"
    assert [m.state for m in state.members] == ["complete", "failed", "depends"]
    assert state.failed[0].failure is not None
    assert qless_client.flows.retry(flow_id) == [f"{flow_id}-1"]
    drain(qless_client)
    state = qless_client.flows.get(flow_id)
    assert state is not None and state.status == "complete" and state.result() == 6


def test_cancel_removes_every_member_not_complete(qless_client: Client) -> None:
    flow_id = qless_client.flows.put(chain(step("a"), group(step("b"), step("c")), step("d")))
    run_ready(qless_client)  # a completes; b and c wait, d depends
    canceled = qless_client.flows.cancel(flow_id)
    assert sorted(canceled) == [f"{flow_id}-{i}" for i in (1, 2, 3)]
    state = qless_client.flows.get(flow_id)
    assert state is not None and state.status == "canceled"
    assert [m.state for m in state.members] == ["complete", None, None, None]
    assert qless_client.queues["q"].pop() is None


@pytest.mark.parametrize(("build", "message"), [
    (lambda: group(), "a group needs at least one step"),
    (lambda: chain(), "a chain needs at least one step"),
    (lambda: chain(step("a"), "not a step"), "chain part 1 must be a step"),
    (lambda: chord(step("a"), step("b")), "a chord's header must be a group"),
])
def test_bad_shapes_are_refused(build: Any, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        build()


def test_bad_steps_are_refused_before_anything_is_written(qless_client: Client) -> None:
    bad_queue = Step("tests.flows.a", {}, "no spaces allowed")
    with pytest.raises(InvalidArgument, match="queue"):
        qless_client.flows.put(chain(step("a"), bad_queue))
    with pytest.raises(InvalidArgument, match="only"):
        qless_client.flows.put(chain(step("a"), Step("x", {}, "q", {"delay": 5})))
    with pytest.raises(InvalidArgument, match="must be a step"):
        qless_client.flows.put("nope")  # type: ignore[arg-type]
    assert qless_client.redis.keys("*") == [] or all(
        not k.startswith("ql:j:") for k in qless_client.redis.keys("*"))


def test_unknown_flow_ids(qless_client: Client) -> None:
    assert qless_client.flows.get("fl0123456789abcdef01234567.3") is None
    with pytest.raises(InvalidArgument, match="not a flow id"):
        qless_client.flows.get("whatever")


def test_put_get_and_cancel_are_one_round_trip_each(
        qless_client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    from redis.connection import AbstractConnection

    sent = [0]
    original = AbstractConnection.send_packed_command

    def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    qless_client.flows.put(chain(step("warm")))  # the engine is loaded once per client
    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)
    flow = chord(group(*[step("a", n=i) for i in range(50)]), step("total"))
    flow_id = qless_client.flows.put(flow)
    assert sent == [1]
    state = qless_client.flows.get(flow_id)
    assert sent == [2] and state is not None and len(state.members) == 51
    assert len(qless_client.flows.cancel(flow_id)) == 51
    assert sent == [4]  # one read, one cancel of every member together


def test_put_middleware_sees_every_member_and_its_headers_travel(qless_client: Client) -> None:
    from django_qless.core import integrations

    seen: list[str] = []

    def middleware(put: integrations.PendingPut, call_next: Any) -> str:
        seen.append(put.jid)
        put.add_headers({"traceparent": f"00-{put.jid}"})
        return str(call_next())

    integrations.install_put_middleware(middleware)
    try:
        flow_id = qless_client.flows.put(chain(step("a"), step("b")))
    finally:
        integrations.uninstall_put_middleware(middleware)
    assert seen == [f"{flow_id}-0", f"{flow_id}-1"]
    for jid in seen:
        data = qless_client.jobs[jid].data
        assert data[integrations.TRACE_KEY] == {"traceparent": f"00-{jid}"}
        assert data[FLOW_KEY]["id"] == flow_id
