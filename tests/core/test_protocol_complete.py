"""Conformance of `complete`, advancing and completed-job retention."""

from __future__ import annotations

from typing import Any

import pytest
import redis

__all__: list[str] = []

WORK = "ql:q:queue-work"
LOCKS = "ql:q:queue-locks"


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", queue, jid, "klass", {}, 0, *pairs)


def running(lua: Any, jid: str = "jid", queue: str = "queue", now: float = 0, **opts: Any) -> None:
    """Put and pop one job as `worker`."""
    put(lua, jid, queue, now=now, **opts)
    popped = lua.json("pop", now, queue, "worker", 1)
    assert popped[0]["jid"] == jid


def complete(lua: Any, jid: str = "jid", now: float = 10, *extra: Any, data: Any = None,
             worker: str = "worker", queue: str = "queue") -> Any:
    """Complete a job."""
    return lua("complete", now, jid, worker, queue, {} if data is None else data, *extra)


def get(lua: Any, jid: str = "jid") -> Any:
    """Return the decoded job object."""
    return lua.json("get", 0, jid)


# -- plain completion ---------------------------------------------------------------------------


def test_complete_returns_complete(lua: Any) -> None:
    """Reply with the bulk string `complete`."""
    running(lua)
    assert complete(lua) == "complete"


def test_complete_updates_job(lua: Any) -> None:
    """Clear worker, queue and expiry; reset remaining; clear failure."""
    running(lua, retries=3)
    lua("retry", 1, "jid", "queue", "worker", 0, "grp", "msg")
    lua("pop", 2, "queue", "worker", 1)
    complete(lua)
    job = get(lua)
    assert job["state"] == "complete"
    assert job["worker"] == ""
    assert job["queue"] == ""
    assert job["expires"] == 0
    assert job["remaining"] == 3
    assert job["failure"] == {}


def test_complete_stores_data_verbatim(lua: Any, r: redis.Redis) -> None:
    """Store the given data as raw text."""
    running(lua)
    complete(lua, data='{"out": [],"x":1}')
    assert r.hget("ql:j:jid", "data") == '{"out": [],"x":1}'


def test_complete_releases_locks(lua: Any, r: redis.Redis) -> None:
    """Remove the jid from locks and the worker's job set."""
    running(lua)
    complete(lua)
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore("ql:w:worker:jobs", "jid") is None
    assert r.zscore(WORK, "jid") is None


def test_complete_registers_in_completed(lua: Any, r: redis.Redis) -> None:
    """Add the jid to `ql:completed` scored by the completion time."""
    running(lua)
    complete(lua, now=1700000000.5)
    assert r.zscore("ql:completed", "jid") == 1700000000.5
    assert r.type("ql:completed") == "zset"


def test_complete_history(lua: Any) -> None:
    """Append `{what: done}` at floor(now)."""
    running(lua)
    complete(lua, now=12.5)
    assert get(lua)["history"][-1] == {"when": 12, "what": "done"}


def test_complete_twice(lua: Any) -> None:
    """The second completion is refused with the state name."""
    running(lua)
    complete(lua)
    with pytest.raises(redis.ResponseError, match="not currently running: complete"):
        complete(lua)


def test_complete_missing_job(lua: Any) -> None:
    """Refuse a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Complete\(\): Job nope does not exist"):
        complete(lua, "nope")


@pytest.mark.parametrize("state", ["waiting", "scheduled", "depends", "failed"])
def test_complete_not_running(lua: Any, state: str) -> None:
    """Refuse a job that is not running, naming its state."""
    put(lua, "dep")
    if state == "waiting":
        put(lua)
    elif state == "scheduled":
        lua("put", 0, "worker", "queue", "jid", "klass", {}, 10)
    elif state == "depends":
        put(lua, depends=["dep"])
    else:
        running(lua, queue="q2")
        lua("fail", 1, "jid", "worker", "grp", "msg")
    with pytest.raises(redis.ResponseError, match=f"is not currently running: {state}"):
        complete(lua)


def test_complete_other_worker(lua: Any) -> None:
    """Refuse a worker that does not own the job."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="handed out to another worker: worker"):
        complete(lua, worker="thief")


def test_complete_other_queue(lua: Any) -> None:
    """Refuse a queue that is not the job's."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="running in another queue: queue"):
        complete(lua, queue="other")


def test_complete_delay_without_next(lua: Any) -> None:
    """Refuse `delay` without `next`."""
    running(lua)
    with pytest.raises(redis.ResponseError, match='"delay" cannot be used without a "next"'):
        complete(lua, "jid", 10, "delay", 5)


def test_complete_depends_without_next(lua: Any) -> None:
    """Refuse `depends` without `next`."""
    running(lua)
    with pytest.raises(redis.ResponseError, match='"depends" cannot be used without a "next"'):
        complete(lua, "jid", 10, "depends", ["x"])


def test_complete_missing_data(lua: Any) -> None:
    """Data is mandatory."""
    running(lua)
    with pytest.raises(redis.ResponseError):
        lua("complete", 10, "jid", "worker", "queue")


def test_complete_during_grace_period(lua: Any) -> None:
    """The owner may still complete after a courtesy lock-lost notice."""
    running(lua)
    assert lua("pop", 61, "queue", "w2", 1) == "{}"
    assert complete(lua, now=62) == "complete"


# -- advancing ----------------------------------------------------------------------------------


def test_advance_returns_waiting(lua: Any, r: redis.Redis) -> None:
    """Move the job to the next queue's work set."""
    running(lua, retries=2)
    lua("retry", 1, "jid", "queue", "worker")
    lua("pop", 2, "queue", "worker", 1)
    assert complete(lua, "jid", 10, "next", "later") == "waiting"
    job = get(lua)
    assert (job["state"], job["queue"], job["worker"], job["expires"]) == (
        "waiting", "later", "", 0)
    assert job["remaining"] == 2
    assert job["failure"] == {}
    assert r.zscore("ql:q:later-work", "jid") == pytest.approx(-10 / 1e10)
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore("ql:completed", "jid") is None


def test_advance_history_and_queue(lua: Any, r: redis.Redis) -> None:
    """Append done and put {q: next}; register the next queue."""
    running(lua)
    complete(lua, "jid", 20, "next", "later")
    assert get(lua)["history"][-2:] == [
        {"when": 20, "what": "done"}, {"when": 20, "what": "put", "q": "later"}]
    assert r.zscore("ql:queues", "later") == 20


def test_fix_advance_with_delay_is_scheduled(lua: Any, r: redis.Redis) -> None:
    """Return and store state `scheduled` (a qless-core bug fixed: docs/compatibility.md)."""
    running(lua)
    assert complete(lua, "jid", 10, "next", "later", "delay", 30) == "scheduled"
    assert r.zscore("ql:q:later-scheduled", "jid") == 40
    assert get(lua)["state"] == "scheduled"


def test_advance_with_open_dependency(lua: Any, r: redis.Redis) -> None:
    """Park the advanced job in the next queue's depends set."""
    put(lua, "dep", "elsewhere")
    running(lua)
    assert complete(lua, "jid", 10, "next", "later", "depends", ["dep"]) == "depends"
    assert r.zscore("ql:q:later-depends", "jid") == 10
    assert get(lua)["state"] == "depends"
    assert r.smembers("ql:j:jid-dependencies") == {"dep"}


def test_advance_with_delay_and_dependency(lua: Any, r: redis.Redis) -> None:
    """Remember now + delay in the `scheduled` field."""
    put(lua, "dep", "elsewhere")
    running(lua)
    assert complete(lua, "jid", 10, "next", "later", "delay", 5, "depends", ["dep"]) == "depends"
    assert float(str(r.hget("ql:j:jid", "scheduled"))) == 15


def test_advance_delay_with_satisfied_dependencies(lua: Any, r: redis.Redis) -> None:
    """Drop the delay when every listed dependency is complete or unknown."""
    running(lua)
    assert complete(lua, "jid", 10, "next", "later", "delay", 5, "depends", ["gone"]) == "waiting"
    assert r.zscore("ql:q:later-work", "jid") is not None


def test_advance_does_not_release_dependents(lua: Any) -> None:
    """Advancing is not completing: dependents stay blocked."""
    running(lua)
    put(lua, "child", depends=["jid"])
    complete(lua, "jid", 10, "next", "later")
    assert get(lua, "child")["state"] == "depends"


# -- dependents ---------------------------------------------------------------------------------


def test_complete_releases_dependent(lua: Any, r: redis.Redis) -> None:
    """Move a dependent whose last dependency completed into work."""
    running(lua)
    put(lua, "child", now=1, depends=["jid"])
    complete(lua, now=10)
    assert get(lua, "child")["state"] == "waiting"
    assert r.zscore("ql:q:queue-depends", "child") is None
    assert r.zscore(WORK, "child") == pytest.approx(-10 / 1e10)
    assert not r.exists("ql:j:jid-dependents")
    assert not r.exists("ql:j:child-dependencies")


def test_complete_releases_delayed_dependent_to_scheduled(lua: Any, r: redis.Redis) -> None:
    """A dependent with a remembered delay goes to `-scheduled` at that time."""
    running(lua)
    lua("put", 1, "worker", "queue", "child", "klass", {}, 100, "depends", ["jid"])
    complete(lua, now=10)
    assert r.zscore("ql:q:queue-scheduled", "child") == 101
    assert get(lua, "child")["state"] == "scheduled"
    assert r.hget("ql:j:child", "scheduled") is None


def test_complete_keeps_dependent_with_other_dependencies(lua: Any) -> None:
    """A dependent with other open dependencies stays in depends."""
    running(lua)
    put(lua, "other")
    put(lua, "child", depends=["jid", "other"])
    complete(lua)
    child = get(lua, "child")
    assert child["state"] == "depends"
    assert child["dependencies"] == ["other"]


# -- statistics ---------------------------------------------------------------------------------


def test_complete_records_run_time(lua: Any) -> None:
    """Record run = complete time - pop time on the completion's day."""
    put(lua, now=0)
    lua("pop", 5, "queue", "worker", 1)
    complete(lua, now=12)
    run = lua.json("stats", 0, "queue", 0)["run"]
    assert run["count"] == 1
    assert run["mean"] == 7
    assert run["histogram"][7] == 1


# -- retention ----------------------------------------------------------------------------------


def test_retention_by_age(lua: Any) -> None:
    """Delete jobs completed at or before now - jobs-history."""
    lua("config.set", 0, "jobs-history", 100)
    running(lua, "old")
    complete(lua, "old", now=10)
    running(lua, "new", now=50)
    complete(lua, "new", now=110)
    assert get(lua, "old") is None
    assert get(lua, "new") is not None
    running(lua, "newer", now=150)
    complete(lua, "newer", now=150)
    assert get(lua, "new") is not None


def test_retention_zero_deletes_immediately(lua: Any, r: redis.Redis) -> None:
    """jobs-history 0 deletes the job that just completed."""
    lua("config.set", 0, "jobs-history", 0)
    running(lua, tags=["t"])
    assert complete(lua) == "complete"
    assert get(lua) is None
    assert not r.exists("ql:j:jid-history")
    assert r.zscore("ql:completed", "jid") is None
    assert r.zscore("ql:t:t", "jid") is None


def test_retention_by_count(lua: Any, r: redis.Redis) -> None:
    """Keep only the newest jobs-history-count completed jobs."""
    lua("config.set", 0, "jobs-history-count", 2)
    for n in range(4):
        running(lua, f"j{n}", now=n)
        complete(lua, f"j{n}", now=n + 0.5)
    assert r.zrange("ql:completed", 0, -1) == ["j2", "j3"]
    assert get(lua, "j0") is None and get(lua, "j1") is None


def test_retention_cleans_tags(lua: Any, r: redis.Redis) -> None:
    """Expired jobs leave their tag indexes."""
    lua("config.set", 0, "jobs-history", 0)
    running(lua, "a", tags=["t"])
    put(lua, "b", tags=["t"])
    complete(lua, "a")
    assert r.zrange("ql:t:t", 0, -1) == ["b"]
    assert r.zscore("ql:tags", "t") == 1


def test_fix_retention_cleans_tracked_and_dependencies(lua: Any, r: redis.Redis) -> None:
    """Expiry removes the job from `ql:tracked` and deletes its dependency sets (fix)."""
    running(lua)
    lua("track", 0, "track", "jid")
    lua("config.set", 0, "jobs-history", 0)
    complete(lua)
    assert r.zscore("ql:tracked", "jid") is None
    assert not r.exists("ql:j:jid-dependents")
    assert not r.exists("ql:j:jid-dependencies")


def test_fix_retention_is_bounded_per_call(lua: Any, r: redis.Redis) -> None:
    """Delete at most 500 expired jobs per completion (docs/engine.md)."""
    pipe = r.pipeline(transaction=False)
    for n in range(700):
        pipe.hset(f"ql:j:old{n}", mapping={"jid": f"old{n}", "state": "complete", "queue": ""})
        pipe.zadd("ql:completed", {f"old{n}": 1})
    pipe.execute()
    lua("config.set", 0, "jobs-history", 100)
    running(lua, now=1000)
    complete(lua, now=1000)
    assert r.zcard("ql:completed") == 201  # 700 - 500 old ones, plus the new one
    running(lua, "again", now=1001)
    complete(lua, "again", now=1001)
    assert r.zrange("ql:completed", 0, -1) == ["jid", "again"]


def test_retention_sees_completions_by_another_writer(lua: Any, r: redis.Redis) -> None:
    """Expire a completed job recorded by another writer (e.g. qless-core) with an older time."""
    lua("config.set", 0, "jobs-history", 100)
    running(lua, "ours", now=1000)
    complete(lua, "ours", now=1000)
    r.hset("ql:j:theirs", mapping={"jid": "theirs", "state": "complete", "queue": ""})
    r.zadd("ql:completed", {"theirs": 500})
    running(lua, "next", now=1050)
    complete(lua, "next", now=1050)
    assert r.zscore("ql:completed", "theirs") is None
    assert not r.exists("ql:j:theirs")


@pytest.mark.parametrize("now", [1700000000.123456, "1700000000.5", "1.7e9"])
def test_complete_records_exact_time_and_score(lua: Any, r: redis.Redis,
                                               now: float | str) -> None:
    """The completion time is the exact ql:completed score; `time` holds it to the ms."""
    lua("put", 0, "worker", "queue", "jid", "klass", "{}", 0, "retries", 3)
    lua("pop", 0, "queue", "worker", 1)
    assert lua("complete", now, "jid", "worker", "queue", "{}") == "complete"
    assert r.zscore("ql:completed", "jid") == float(now)
    assert float(r.hget("ql:j:jid", "time")) == int(float(now) * 1000) / 1000
    assert r.hget("ql:j:jid", "remaining") == "3"
    assert r.hget("ql:j:jid", "expires") == "0"
