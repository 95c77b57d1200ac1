"""Extension: `retry ... [token] [priority]` puts the job back at a new priority."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_qless.core import Client, InvalidArgument
from tests.core.conftest import snapshot

WORK = "ql:q:queue-work"


def running(lua: Any, jid: str = "jid", priority: int = 0, retries: int = 5) -> None:
    """Put and pop one job as `worker`."""
    lua("put", 0, "worker", "queue", jid, "klass", {}, 0, "priority", priority,
        "retries", retries)
    assert lua.json("pop", 0, "queue", "worker", 1)[0]["jid"] == jid


def test_retry_with_a_priority_requeues_at_that_priority(lua: Any, r: redis.Redis) -> None:
    running(lua, priority=1)
    lua("put", 0, "worker", "queue", "other", "klass", {}, 0, "priority", 5)
    assert lua("retry", 10, "jid", "queue", "worker", 0, "", "", "", 9) == 4
    job = lua.json("get", 0, "jid")
    assert (job["priority"], job["state"]) == (9, "waiting")
    # The higher priority is served first, ahead of the job that was waiting.
    assert [j["jid"] for j in lua.json("pop", 11, "queue", "worker", 2)] == ["jid", "other"]


def test_retry_with_a_delay_keeps_the_new_priority_for_later(lua: Any) -> None:
    running(lua, priority=3)
    assert lua("retry", 10, "jid", "queue", "worker", 60, "grp", "msg", "tok", -2) == 4
    job = lua.json("get", 0, "jid")
    assert (job["priority"], job["state"]) == (-2, "scheduled")


def test_an_empty_priority_keeps_the_old_one(lua: Any) -> None:
    running(lua, priority=3)
    lua("retry", 10, "jid", "queue", "worker", 0, "", "", "", "")
    assert lua.json("get", 0, "jid")["priority"] == 3


def test_the_stock_six_argument_retry_is_unchanged(lua: Any) -> None:
    running(lua, priority=3)
    assert lua("retry", 10, "jid", "queue", "worker", 0, "grp", "msg") == 4
    assert lua.json("get", 0, "jid")["priority"] == 3


def test_a_retry_that_exhausts_the_job_fails_it_without_touching_priority(lua: Any) -> None:
    running(lua, priority=3, retries=0)
    assert lua("retry", 10, "jid", "queue", "worker", 0, "", "", "", 7) == -1
    job = lua.json("get", 0, "jid")
    assert (job["state"], job["priority"]) == ("failed", 3)


@pytest.mark.parametrize("bad", ["high", "1.5", "2147483648", "nan"])
def test_a_bad_priority_is_refused_before_any_write(lua: Any, r: redis.Redis, bad: str) -> None:
    running(lua, priority=3)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match='Retry\\(\\): Arg "priority" '):
        lua("retry", 10, "jid", "queue", "worker", 0, "", "", "", bad)
    assert snapshot(r) == before


def test_a_replayed_retry_with_a_token_returns_the_recorded_result(lua: Any) -> None:
    running(lua, priority=3)
    assert lua("retry", 10, "jid", "queue", "worker", 0, "", "", "tok", 8) == 4
    assert lua("retry", 11, "jid", "queue", "worker", 0, "", "", "tok", 8) == 4
    assert lua.json("get", 0, "jid")["priority"] == 8


def test_client_job_retry_takes_a_priority(client: Client) -> None:
    client.queues["queue"].put("klass", {}, jid="jid", priority=1)
    job = client.queues["queue"].pop()
    assert job is not None
    assert job.retry(priority=20) == 4 and job.priority == 20
    assert client.jobs["jid"].priority == 20
    job = client.queues["queue"].pop()
    assert job is not None
    with pytest.raises(InvalidArgument, match="priority"):
        job.retry(priority=2**40)
    assert client.jobs["jid"].state == "running"
