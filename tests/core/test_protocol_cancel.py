"""Conformance of `cancel`."""

from __future__ import annotations

from typing import Any

import pytest
import redis

__all__: list[str] = []


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, delay: float = 0,
        **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", queue, jid, "klass", {}, delay, *pairs)


def running(lua: Any, jid: str = "jid", **opts: Any) -> None:
    """Put and pop one job as `worker`."""
    put(lua, jid, **opts)
    assert lua.json("pop", 0, "queue", "worker", 1)[0]["jid"] == jid


def test_cancel_returns_array_of_jids(lua: Any) -> None:
    """Reply with a RESP array of the jids given."""
    put(lua, "a")
    put(lua, "b")
    assert lua("cancel", 0, "a", "b") == ["a", "b"]


def test_cancel_unknown_jid_is_not_an_error(lua: Any) -> None:
    """Cancelling a jid that does not exist returns it."""
    assert lua("cancel", 0, "nope") == ["nope"]


def test_cancel_deletes_job_and_history(lua: Any, r: redis.Redis) -> None:
    """Delete the hash and the history list."""
    put(lua)
    lua("cancel", 0, "jid")
    assert lua("get", 0, "jid") is None
    assert not r.exists("ql:j:jid")
    assert not r.exists("ql:j:jid-history")


@pytest.mark.parametrize("key,delay", [("work", 0), ("scheduled", 10)])
def test_cancel_removes_from_queue(lua: Any, r: redis.Redis, key: str, delay: float) -> None:
    """Remove waiting and scheduled jobs from their sets."""
    put(lua, delay=delay)
    assert r.zscore(f"ql:q:queue-{key}", "jid") is not None
    lua("cancel", 0, "jid")
    assert r.zscore(f"ql:q:queue-{key}", "jid") is None


def test_cancel_running_job(lua: Any, r: redis.Redis) -> None:
    """Remove the lock and the worker's entry."""
    running(lua)
    lua("cancel", 1, "jid")
    assert r.zscore("ql:q:queue-locks", "jid") is None
    assert r.zscore("ql:w:worker:jobs", "jid") is None
    with pytest.raises(redis.ResponseError, match="does not exist"):
        lua("complete", 2, "jid", "worker", "queue", {})


def test_cancel_depending_job(lua: Any, r: redis.Redis) -> None:
    """Remove a job in depends and unlink it from its dependency."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    lua("cancel", 0, "b")
    assert r.zscore("ql:q:queue-depends", "b") is None
    assert not r.sismember("ql:j:a-dependents", "b")
    assert not r.exists("ql:j:b-dependencies")


def test_cancel_refuses_to_break_dependency(lua: Any, r: redis.Redis) -> None:
    """Refuse to cancel a job others depend on unless they are canceled too."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    with pytest.raises(redis.ResponseError, match="a is a dependency of b"):
        lua("cancel", 0, "a")
    assert lua.json("get", 0, "a")["state"] == "waiting"
    assert r.smembers("ql:j:a-dependents") == {"b"}


@pytest.mark.parametrize("order", [("a", "b"), ("b", "a")])
def test_cancel_dependency_with_dependents(
    lua: Any, r: redis.Redis, order: tuple[str, str]
) -> None:
    """Cancel a dependency and its dependents together, in any order."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    assert lua("cancel", 0, *order) == list(order)
    assert not r.exists("ql:j:a")
    assert not r.exists("ql:j:b")
    assert not r.exists("ql:j:a-dependents")


def test_cancel_failed_job(lua: Any, r: redis.Redis) -> None:
    """Remove a failed job from its group and decrement the failed count."""
    running(lua)
    lua("fail", 5, "jid", "worker", "grp", "msg")
    lua("cancel", 6, "jid")
    assert not r.exists("ql:f:grp")
    assert not r.sismember("ql:failures", "grp")
    assert lua.json("stats", 6, "queue", 0)["failed"] == 0
    assert lua.json("failed", 6) == {}


def test_cancel_failed_job_keeps_other_failures(lua: Any, r: redis.Redis) -> None:
    """Keep the group while it still has failed jobs."""
    for jid in ("a", "b"):
        running(lua, jid)
        lua("fail", 5, jid, "worker", "grp", "msg")
    lua("cancel", 6, "a")
    assert r.lrange("ql:f:grp", 0, -1) == ["b"]
    assert r.sismember("ql:failures", "grp")


def test_cancel_removes_tags(lua: Any, r: redis.Redis) -> None:
    """Remove tag memberships and their counts."""
    put(lua, "a", tags=["t", "u"])
    put(lua, "b", tags=["t"])
    lua("cancel", 0, "a")
    assert r.zrange("ql:t:t", 0, -1) == ["b"]
    assert r.zscore("ql:tags", "t") == 1
    assert not r.zscore("ql:tags", "u")
    assert not r.exists("ql:t:u")


def test_fix_cancel_untracks(lua: Any, r: redis.Redis) -> None:
    """Remove a canceled job from `ql:tracked` (docs/engine.md fix)."""
    put(lua)
    lua("track", 0, "track", "jid")
    lua("cancel", 1, "jid")
    assert r.zscore("ql:tracked", "jid") is None
    assert lua.json("track", 2) == {"jobs": {}, "expired": {}}


def test_cancel_skips_complete_jobs(lua: Any, r: redis.Redis) -> None:
    """A completed job cannot be canceled; it stays."""
    running(lua)
    lua("complete", 1, "jid", "worker", "queue", {})
    assert lua("cancel", 2, "jid") == ["jid"]
    assert lua.json("get", 2, "jid")["state"] == "complete"
    assert r.zscore("ql:completed", "jid") == 1


def test_cancel_mixed_list(lua: Any) -> None:
    """Cancel what can be canceled in one call."""
    running(lua, "b")
    put(lua, "a")
    put(lua, "c", delay=5)
    assert lua("cancel", 1, "a", "b", "c", "nope") == ["a", "b", "c", "nope"]
    assert lua.json("multiget", 1, "a", "b", "c") == {}


def test_cancel_queue_counts(lua: Any) -> None:
    """Leave the queue empty."""
    put(lua, "a")
    put(lua, "b", delay=10)
    lua("cancel", 0, "a", "b")
    assert lua("length", 0, "queue") == 0
