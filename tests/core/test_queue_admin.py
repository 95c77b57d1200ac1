"""Emptying a queue that holds jobs: counts first, then bounded, resumable batches."""

from __future__ import annotations

import json

import pytest

from django_qless.core import Client, Queue
from django_qless.core.console.queue_admin import EmptyCursor, EmptyStep
from django_qless.core.exceptions import InvalidArgument


def fill(client: Client, q: Queue) -> None:
    """Put a queue in every state: waiting, scheduled, depends, running, failed, recurring."""
    for i in range(7):
        q.put("K", {}, jid=f"w{i}", priority=10 - i)
    q.put("K", {}, jid="later", delay=600)
    q.put("K", {}, jid="child", depends=["w0"])
    running = q.pop()
    assert running is not None and running.jid == "w0"  # w0 runs; child depends on it
    q.pop().fail("boom", "failed")  # type: ignore[union-attr]
    q.recur("K", {}, 3600, jid="every-hour", offset=3600)
    client.queues["other"].put("K", {}, jid="elsewhere")


def run_to_end(q: Queue, batch: int) -> tuple[list[EmptyStep], EmptyCursor]:
    steps: list[EmptyStep] = []
    cursor = None
    for _ in range(50):
        step = q.empty(batch=batch, cursor=cursor)
        steps.append(step)
        # A cursor travels as text between requests.
        cursor = EmptyCursor.loads(step.cursor.dumps())
        if step.done:
            return steps, cursor
    raise AssertionError("emptying never finished")


def test_contents_counts_every_state_and_the_queues_failed_jobs(client: Client, q: Queue
                                                                ) -> None:
    fill(client, q)
    other = client.queues["other"]
    other.put("K", {}, jid="of")
    other.pop().fail("boom", "not ours")  # type: ignore[union-attr]
    contents = q.contents()
    assert contents.counts == {"depends": 1, "throttled": 0, "scheduled": 1, "stalled": 0,
                               "waiting": 5, "running": 1, "recurring": 1, "failed": 1}
    assert contents.total == 10 and not contents.failed_capped


def test_empty_in_small_batches_removes_everything_of_the_queue_only(client: Client, q: Queue
                                                                   ) -> None:
    fill(client, q)
    steps, cursor = run_to_end(q, batch=3)
    assert len(steps) >= 4  # bounded: never more than 3 per step
    assert all(s.removed <= 3 for s in steps)
    canceled: dict[str, int] = {}
    for s in steps:
        for state, n in s.canceled.items():
            canceled[state] = canceled.get(state, 0) + n
    assert canceled == {"depends": 1, "scheduled": 1, "waiting": 5, "running": 1, "failed": 1}
    assert sum(s.unrecurred for s in steps) == 1
    assert cursor.kept == {}
    assert q.contents().total == 0
    assert client.jobs.get("w0") is None and client.jobs.failed() == {}
    assert client.jobs.recurring("every-hour") is None
    assert client.jobs["elsewhere"].state == "waiting"


def test_the_running_jobs_worker_is_told(client: Client, q: Queue, events) -> None:  # type: ignore[no-untyped-def]
    q.put("K", {}, jid="r")
    q.pop()
    assert q.empty().done or q.empty().done
    told = [json.loads(p) for ch, p in events() if ch == "ql:w:w1"]
    assert {"jid": "r", "event": "canceled"}.items() <= told[-1].items()


def test_a_job_another_queue_needs_is_kept_and_reported(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="needed")
    q.put("K", {}, jid="free")
    client.queues["other"].put("K", {}, jid="waiter", depends=["needed"])
    steps, cursor = run_to_end(q, batch=500)
    assert set(cursor.kept) == {"needed"}
    assert "waiter" in cursor.kept["needed"]
    assert client.jobs.get("free") is None and client.jobs["needed"].state == "waiting"
    assert client.jobs["waiter"].state == "depends"


def test_failed_jobs_past_the_scan_are_found_on_later_steps(client: Client, q: Queue,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from django_qless.core.console import queue_admin

    monkeypatch.setattr(queue_admin, "FAILED_SCAN", 4)
    other = client.queues["other"]
    for i in range(3):
        q.put("K", {}, jid=f"mine{i}")
        q.pop().fail("g", "x")  # type: ignore[union-attr]
    for i in range(6):  # newer failures of another queue come first in the group
        other.put("K", {}, jid=f"theirs{i}")
        other.pop().fail("g", "x")  # type: ignore[union-attr]
    run_to_end(q, batch=2)
    assert client.jobs.failed() == {"g": 6}
    assert all(client.jobs.get(f"mine{i}") is None for i in range(3))


def test_batch_and_cursor_are_checked(client: Client, q: Queue) -> None:
    with pytest.raises(InvalidArgument):
        q.empty(batch=0)
    with pytest.raises(InvalidArgument):
        q.empty(batch=501)
    with pytest.raises(InvalidArgument):
        EmptyCursor.loads("[1]")
    with pytest.raises(InvalidArgument):
        EmptyCursor.loads('{"groups": {"g": -5}}')
    assert q.empty().done


def test_a_dependency_chain_longer_than_a_batch_goes_entirely(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="c0")
    for i in range(1, 8):  # c7 depends on c6 ... on c0
        q.put("K", {}, jid=f"c{i}", depends=[f"c{i - 1}"])
    steps, cursor = run_to_end(q, batch=2)
    assert cursor.kept == {}
    assert all(client.jobs.get(f"c{i}") is None for i in range(8))
    assert sum(sum(s.canceled.values()) for s in steps) == 8
