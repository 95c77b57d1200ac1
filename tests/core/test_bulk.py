"""Batched job actions: one round trip, every refused jid reported with its reason."""

from __future__ import annotations

import pytest

from django_qless.core import Client, Queue
from django_qless.core.exceptions import InvalidArgument, LimitExceeded


def failed(client: Client, q: Queue, jid: str) -> str:
    q.put("K", {}, jid=jid, priority=100)
    job = q.pop()
    assert job is not None and job.jid == jid
    job.fail("g", "boom")
    return jid


def test_retry_many_retries_failed_and_reports_the_rest(client: Client, q: Queue) -> None:
    failed(client, q, "f1")
    failed(client, q, "f2")
    q.put("K", {}, jid="w")
    result = client.jobs.retry_many(["f1", "w", "gone", "f2", "f1"])
    assert result.done == ["f1", "f2"]
    assert result.refused == {"w": "it is waiting, not failed",
                              "gone": "it does not exist any more"}
    assert client.jobs["f1"].state == "waiting" and client.jobs.failed() == {}


def test_move_many_and_priority_many(client: Client, q: Queue) -> None:
    q.put("K", {"n": 1}, jid="a", priority=3, tags=["t"])
    q.put("K", {}, jid="b")
    failed(client, q, "f")
    result = client.jobs.move_many(["a", "b", "f"], "other", states=("waiting",))
    assert result.done == ["a", "b"]
    assert result.refused == {"f": "it is failed, so it can't be moved"}
    a = client.jobs["a"]
    assert (a.queue_name, a.priority, a.tags, a.data) == ("other", 3, ("t",), {"n": 1})
    result = client.jobs.set_priority_many(["a", "f"], 7, states=("waiting",))
    assert result.done == ["a"] and "f" in result.refused
    assert client.jobs["a"].priority == 7
    with pytest.raises(InvalidArgument):
        client.jobs.set_priority_many(["a"], 2**40)


def test_track_many(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b")
    client.jobs["b"].track()
    result = client.jobs.track_many(["a", "b"])
    assert result.done == ["a"] and result.refused == {"b": "it is already tracked"}
    assert client.jobs["a"].tracked
    assert client.jobs.track_many(["a", "b"], track=False).done == ["a", "b"]
    assert not client.jobs["b"].tracked


def test_cancel_many_leaves_out_jobs_others_depend_on(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="base")
    q.put("K", {}, jid="child", depends=["base"])
    q.put("K", {}, jid="alone")
    q.put("K", {}, jid="root")
    q.put("K", {}, jid="leaf", depends=["root"])
    result = client.jobs.cancel_many(["base", "alone", "root", "leaf", "nope"])
    assert sorted(result.done) == ["alone", "leaf", "root"]
    assert result.refused == {"base": "other jobs depend on it (child)",
                              "nope": "it does not exist any more"}
    assert client.jobs.get("base") is not None and client.jobs.get("alone") is None


def test_bulk_is_capped(client: Client) -> None:
    with pytest.raises(LimitExceeded):
        client.jobs.retry_many([f"j{i}" for i in range(501)])
    assert client.jobs.cancel_many([]).done == []
