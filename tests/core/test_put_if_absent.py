"""The engine's put-if-absent option: a put that refuses, writing nothing, an existing jid."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument, JobExists
from tests.core.conftest import snapshot

__all__: list[str] = []


def put(lua: Any, jid: str = "jid", queue: str = "queue", *opts: Any, now: float = 0) -> Any:
    """Put one job with trailing options."""
    return lua("put", now, "worker", queue, jid, "klass", {"n": 1}, 0, *opts)


def test_a_new_jid_is_put(lua: Any, r: redis.Redis) -> None:
    assert put(lua, "a", "queue", "if-absent", "any") == "a"
    assert r.hget("ql:j:a", "state") == "waiting"
    assert r.zscore("ql:q:queue-work", "a") is not None


@pytest.mark.parametrize("mode", ["any", "live"])
def test_a_waiting_job_is_not_replaced(lua: Any, r: redis.Redis, mode: str) -> None:
    put(lua, "a", "queue")
    before = snapshot(r)
    with pytest.raises(redis.ResponseError,
                       match=r"Put\(\): Job a already exists \(waiting\): if-absent refuses"):
        lua("put", 5, "other-worker", "elsewhere", "a", "K2", {"n": 2}, 9, "priority", 7,
            "if-absent", mode)
    assert snapshot(r) == before


@pytest.mark.parametrize("mode", ["any", "live"])
def test_a_running_job_is_not_replaced(lua: Any, r: redis.Redis, mode: str) -> None:
    put(lua, "a", "queue")
    lua("pop", 1, "queue", "w1", 1)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"already exists \(running\)"):
        put(lua, "a", "queue", "if-absent", mode, now=2)
    assert snapshot(r) == before
    assert r.hget("ql:j:a", "worker") == "w1"


def test_live_replaces_a_completed_job_and_any_does_not(lua: Any, r: redis.Redis) -> None:
    put(lua, "a", "queue")
    lua("pop", 1, "queue", "w1", 1)
    lua("complete", 2, "a", "w1", "queue", "{}")
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"already exists \(complete\)"):
        put(lua, "a", "next", "if-absent", "any", now=3)
    assert snapshot(r) == before
    assert put(lua, "a", "next", "if-absent", "live", now=3) == "a"
    assert r.hget("ql:j:a", "state") == "waiting"
    assert r.zscore("ql:completed", "a") is None
    assert r.zscore("ql:q:next-work", "a") is not None


def test_live_replaces_a_failed_job(lua: Any, r: redis.Redis) -> None:
    put(lua, "a", "queue")
    lua("pop", 1, "queue", "w1", 1)
    lua("fail", 2, "a", "w1", "boom", "message", "{}")
    assert put(lua, "a", "queue", "if-absent", "live", now=3) == "a"
    assert r.hget("ql:j:a", "state") == "waiting"
    assert r.zscore("ql:failed:boom", "a") is None


def test_a_bad_mode_is_refused_before_any_write(lua: Any, r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r'Arg "if-absent" must be any or live: yes'):
        put(lua, "a", "queue", "if-absent", "yes")
    assert snapshot(r) == before


def test_a_spawned_recurring_child_may_be_copied_a_future_one_not(lua: Any,
                                                                   r: redis.Redis) -> None:
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 60, 0)
    lua("peek", 0, "queue", 1)  # spawns rec-1: the template's count is 1
    lua("cancel", 0, "rec-1")
    assert put(lua, "rec-1", "queue", "if-absent", "any", now=1) == "rec-1"
    with pytest.raises(redis.ResponseError, match="rec-2 collides with recurring job rec"):
        put(lua, "rec-2", "queue", "if-absent", "any", now=1)
    with pytest.raises(redis.ResponseError, match="rec-1 collides with recurring job rec"):
        lua("cancel", 0, "rec-1")
        put(lua, "rec-1", "queue", now=1)  # without the option: today's rule


def test_the_client_raises_job_exists(client: Client) -> None:
    queue = client.queues["q"]
    jid = queue.put("K", {})
    with pytest.raises(JobExists, match=f"Job {jid} already exists"):
        client.call("put", "", "q", jid, "K", "{}", 0, "if-absent", "any")
    with pytest.raises(InvalidArgument, match="if-absent"):
        client.call("put", "", "q", jid, "K", "{}", 0, "if-absent", "maybe")
