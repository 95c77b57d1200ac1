"""Acting on every job a listing matches, in bounded resumable steps."""

from __future__ import annotations

import pytest

from django_qless.core import Client, Queue
from django_qless.core.console.sweep import Selection, sweep_step
from django_qless.core.exceptions import InvalidArgument


def sweep(client: Client, selection: Selection, action: str, batch: int, **kw: object
          ) -> tuple[list[str], dict[str, str], int]:
    done: list[str] = []
    refused: dict[str, str] = {}
    position: int | None = 0
    steps = 0
    while position is not None:
        step = sweep_step(client, selection, action, position=position, batch=batch, **kw)  # type: ignore[arg-type]
        done += step.result.done
        refused.update(step.result.refused)
        position = step.position
        steps += 1
        assert steps < 100
    return done, refused, steps


def test_cancel_every_waiting_job_in_batches(client: Client, q: Queue) -> None:
    for i in range(11):
        q.put("K", {}, jid=f"j{i}")
    q.put("K", {}, jid="needed")
    client.queues["other"].put("K", {}, jid="dependent", depends=["needed"])
    done, refused, steps = sweep(client, Selection(queue="q", state="waiting"), "cancel", 3)
    assert sorted(done) == sorted(f"j{i}" for i in range(11))
    assert list(refused) == ["needed"] and steps >= 4
    assert q.jobs.waiting(0, 100) == ["needed"]


def test_priority_and_move_to_the_same_queue_walk_the_whole_listing(client: Client, q: Queue
                                                                    ) -> None:
    for i in range(7):
        q.put("K", {}, jid=f"j{i}")
    done, _, _ = sweep(client, Selection(queue="q", state="waiting"), "priority", 2,
                       priority=5)
    assert sorted(done) == sorted(f"j{i}" for i in range(7))
    assert {client.jobs[f"j{i}"].priority for i in range(7)} == {5}
    done, _, _ = sweep(client, Selection(queue="q", state="waiting"), "move", 2, queue="r")
    assert len(done) == 7 and client.queues["r"].length == 7


def test_retry_a_filtered_failure_group(client: Client, q: Queue) -> None:
    other = client.queues["other"]
    for i in range(5):
        q.put("K", {}, jid=f"m{i}")
        q.pop().fail("g", "x")  # type: ignore[union-attr]
        other.put("K", {}, jid=f"o{i}")
        other.pop().fail("g", "x")  # type: ignore[union-attr]
    done, refused, _ = sweep(client, Selection(group="g", queue="q"), "retry", 2)
    assert sorted(done) == [f"m{i}" for i in range(5)] and refused == {}
    assert client.jobs.failed() == {"g": 5} and q.length == 5


def test_selection_and_action_are_checked(client: Client) -> None:
    with pytest.raises(InvalidArgument):
        Selection(queue="q", state="failed")
    with pytest.raises(InvalidArgument):
        Selection()
    with pytest.raises(InvalidArgument):
        sweep_step(client, Selection(queue="q", state="waiting"), "explode")
    with pytest.raises(InvalidArgument):
        sweep_step(client, Selection(queue="q", state="waiting"), "move", queue="bad name")
