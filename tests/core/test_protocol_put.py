"""Conformance of `put` and `requeue`."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

WORK = "ql:q:queue-work"
SCHED = "ql:q:queue-scheduled"
DEPS = "ql:q:queue-depends"
LOCKS = "ql:q:queue-locks"


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, delay: Any = 0,
        data: Any = None, worker: str = "worker", klass: str = "klass", **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, worker, queue, jid, klass, {} if data is None else data, delay, *pairs)


def get(lua: Any, jid: str = "jid") -> Any:
    """Return the decoded job object."""
    return lua.json("get", 0, jid)


# -- reply and hash ----------------------------------------------------------------------------


def test_put_returns_the_jid(lua: Any) -> None:
    """Reply with the jid as a bulk string."""
    assert put(lua, "abc") == "abc"


def test_put_writes_the_job_hash(lua: Any, r: redis.Redis) -> None:
    """Write every field of the job hash."""
    put(lua, data='{"a": [1, 2]}', now=1700000000.5)
    job = r.hgetall("ql:j:jid")
    if KEYSPACE is not None:
        # A shard keyspace writes lean records: no jid, priority 0, empty tags or remaining
        # equal to retries (docs/engine.md, "Lean job records").
        assert not {"jid", "priority", "tags", "remaining"} & set(job)
        job.update(jid="jid", priority="0", tags="{}", remaining=job["retries"])
    assert job["jid"] == "jid"
    assert job["klass"] == "klass"
    assert job["data"] == '{"a": [1, 2]}'
    assert job["state"] == "waiting"
    assert job["queue"] == "queue"
    assert float(job["priority"]) == 0
    # A new job leaves out what every reader defaults: no worker, no expiry (a smaller
    # hash per waiting job; docs/engine.md, "Internal bookkeeping").
    assert "worker" not in job and "expires" not in job
    assert job["tags"] == "{}"
    assert float(job["retries"]) == 5
    assert float(job["remaining"]) == 5
    assert job["time"] == "1700000000.5"
    assert r.type("ql:j:jid") == "hash"


def test_put_job_object_shape(lua: Any) -> None:
    """Expose exactly the documented job object keys (qless-core's; `throttles` only when the
    job has some, docs/engine.md)."""
    put(lua)
    job = get(lua)
    assert set(job) == {
        "jid", "klass", "state", "queue", "worker", "tracked", "priority", "expires", "retries",
        "remaining", "data", "tags", "history", "failure", "spawned_from_jid", "dependents",
        "dependencies",
    }
    assert job["jid"] == "jid"
    assert job["state"] == "waiting"
    assert job["worker"] == ""
    assert job["tracked"] is False
    assert job["priority"] == 0
    assert job["expires"] == 0
    assert job["retries"] == 5
    assert job["remaining"] == 5
    assert job["data"] == "{}"
    assert job["failure"] == {}
    assert job["spawned_from_jid"] is False
    # The cjson quirk: empty lists come back as {}.
    assert job["tags"] == {}
    assert job["dependents"] == {}
    assert job["dependencies"] == {}


def test_put_stores_data_verbatim(lua: Any) -> None:
    """Keep the caller's JSON text byte for byte (no re-encoding, `[]` stays `[]`)."""
    raw = '{"b": [],  "a": 1.10000000000000001, "u": "\\u00e9/x"}'
    put(lua, data=raw)
    assert get(lua)["data"] == raw


def test_put_history_entry(lua: Any) -> None:
    """Append `{what: put, q: queue}` at floor(now)."""
    put(lua, now=1700000000.75)
    assert get(lua)["history"] == [{"when": 1700000000, "what": "put", "q": "queue"}]


def test_put_history_key_is_a_list(lua: Any, r: redis.Redis) -> None:
    """Store nothing for a new job's first put (implied by `time` + `queue`), later ones in
    the list, the implied entry first (docs/compatibility.md, "Compact first-visit history")."""
    put(lua)
    assert r.hget("ql:j:jid", "history") is None
    assert not r.exists("ql:j:jid-history")
    put(lua, now=1)
    assert r.type("ql:j:jid-history") == "list"
    assert r.lrange("ql:j:jid-history", 0, -1) == [
        '[0,"put",{"q":"queue"}]', '[1,"put",{"q":"queue"}]']
    assert r.hget("ql:j:jid", "history") is None


def test_put_registers_queue_once(lua: Any, r: redis.Redis) -> None:
    """Add the queue to `ql:queues` at first sight only."""
    put(lua, "a", now=5)
    put(lua, "b", now=9)
    assert r.zscore("ql:queues", "queue") == 5


# -- placement ----------------------------------------------------------------------------------


@pytest.mark.parametrize("now", [0, 10, 1700000000.5])
@pytest.mark.parametrize("priority", [0, 5, -3])
def test_put_work_score(lua: Any, r: redis.Redis, now: float, priority: int) -> None:
    """Score a waiting job with priority - now / 1e10."""
    put(lua, now=now, priority=priority)
    assert r.zscore(WORK, "jid") == pytest.approx(priority - now / 1e10, rel=1e-15, abs=1e-15)


def test_put_with_delay_is_scheduled(lua: Any, r: redis.Redis) -> None:
    """Place a delayed job in `-scheduled` at now + delay, state scheduled."""
    put(lua, now=100, delay=30)
    assert r.zscore(SCHED, "jid") == 130
    assert r.zscore(WORK, "jid") is None
    assert get(lua)["state"] == "scheduled"


def test_put_delay_zero_is_waiting(lua: Any, r: redis.Redis) -> None:
    """Treat delay 0 as immediately available."""
    put(lua, now=100, delay=0)
    assert r.zscore(SCHED, "jid") is None
    assert r.zscore(WORK, "jid") is not None


def test_put_fractional_delay(lua: Any, r: redis.Redis) -> None:
    """Accept a fractional delay."""
    put(lua, now=1700000000.5, delay=0.25)
    assert r.zscore(SCHED, "jid") == 1700000000.75


def test_put_with_open_dependency(lua: Any, r: redis.Redis) -> None:
    """Park a job with an unfinished dependency in `-depends` (score now)."""
    put(lua, "a")
    put(lua, "b", now=7, depends=["a"])
    assert r.zscore(DEPS, "b") == 7
    assert r.zscore(WORK, "b") is None
    assert get(lua, "b")["state"] == "depends"
    assert r.smembers("ql:j:b-dependencies") == {"a"}
    assert r.smembers("ql:j:a-dependents") == {"b"}
    assert r.type("ql:j:b-dependencies") == "set"


def test_put_dependency_objects(lua: Any) -> None:
    """Report dependencies and dependents on both job objects."""
    put(lua, "a")
    put(lua, "c")
    put(lua, "b", depends=["a", "c"])
    assert sorted(get(lua, "b")["dependencies"]) == ["a", "c"]
    assert get(lua, "a")["dependents"] == ["b"]


def test_put_dependency_on_missing_job_is_ignored(lua: Any, r: redis.Redis) -> None:
    """Silently ignore dependencies that do not exist (qless behaviour without depends-missing)."""
    put(lua, "b", depends=["nope"])
    assert get(lua, "b")["state"] == "waiting"
    assert r.zscore(WORK, "b") is not None
    assert not r.exists("ql:j:b-dependencies")


def test_put_dependency_on_complete_job_is_satisfied(lua: Any, r: redis.Redis) -> None:
    """Treat a completed dependency as satisfied."""
    put(lua, "a")
    lua("pop", 1, "queue", "worker", 1)
    lua("complete", 2, "a", "worker", "queue", {})
    put(lua, "b", now=3, depends=["a"])
    assert get(lua, "b")["state"] == "waiting"
    assert r.zscore(WORK, "b") is not None


def test_put_delay_and_dependency(lua: Any, r: redis.Redis) -> None:
    """Remember now + delay in the `scheduled` field while in `-depends`."""
    put(lua, "a")
    put(lua, "b", now=10, delay=50, depends=["a"])
    assert r.zscore(DEPS, "b") == 10
    assert r.zscore(SCHED, "b") is None
    assert float(str(r.hget("ql:j:b", "scheduled"))) == 60
    assert get(lua, "b")["state"] == "depends"


def test_put_empty_depends_keeps_old_dependencies(lua: Any, r: redis.Redis) -> None:
    """An explicit empty depends list does not clear earlier dependencies."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "b", depends=[])
    assert r.smembers("ql:j:b-dependencies") == {"a"}
    assert get(lua, "b")["state"] == "depends"


def test_put_new_depends_replaces_old(lua: Any, r: redis.Redis) -> None:
    """A non-empty depends list prunes previous dependencies in both directions."""
    put(lua, "a")
    put(lua, "c")
    put(lua, "b", depends=["a"])
    put(lua, "b", depends=["c"])
    assert r.smembers("ql:j:b-dependencies") == {"c"}
    assert not r.sismember("ql:j:a-dependents", "b")
    assert r.smembers("ql:j:c-dependents") == {"b"}


# -- ordering -----------------------------------------------------------------------------------


def test_higher_priority_pops_first(lua: Any) -> None:
    """Pop larger priority numbers first (priorities 9..-10)."""
    for n, priority in enumerate(range(-10, 10)):
        put(lua, f"j{priority + 10}", now=n, priority=priority)
    popped = lua.json("pop", 100, "queue", "worker", 20)
    assert [job["priority"] for job in popped] == list(range(9, -11, -1))


def test_same_priority_is_fifo(lua: Any) -> None:
    """Pop equal priorities in insertion-time order."""
    for n in range(10):
        put(lua, f"j{9 - n}", now=1700000000 + n * 0.001)
    popped = lua.json("pop", 1700000001, "queue", "worker", 10)
    assert [job["jid"] for job in popped] == [f"j{9 - n}" for n in range(10)]


# -- options and carry-over ---------------------------------------------------------------------


def test_put_options(lua: Any) -> None:
    """Honour priority, tags and retries options."""
    put(lua, priority=3, tags=["x", "y"], retries=2)
    job = get(lua)
    assert job["priority"] == 3
    assert job["tags"] == ["x", "y"]
    assert job["retries"] == 2
    assert job["remaining"] == 2


def test_reput_keeps_priority_tags_retries(lua: Any) -> None:
    """Fall back to the existing job's priority, tags and retries."""
    put(lua, priority=3, tags=["x"], retries=2)
    put(lua, "jid", "other")
    job = get(lua)
    assert (job["priority"], job["tags"], job["retries"], job["queue"]) == (3, ["x"], 2, "other")


def test_put_tag_indexes(lua: Any, r: redis.Redis) -> None:
    """Index tags in `ql:t:<tag>` (score now) and count them in `ql:tags`."""
    put(lua, "a", now=4, tags=["x", "y"])
    put(lua, "b", now=5, tags=["x"])
    assert r.zscore("ql:t:x", "a") == 4
    assert r.zscore("ql:t:x", "b") == 5
    assert r.zscore("ql:tags", "x") == 2
    assert r.zscore("ql:tags", "y") == 1


def test_reput_with_new_tags_moves_indexes(lua: Any, r: redis.Redis) -> None:
    """Strip the old tags and index the new ones."""
    put(lua, tags=["x"])
    put(lua, tags=["y"])
    assert r.zscore("ql:t:x", "jid") is None
    assert not r.zscore("ql:tags", "x")
    assert r.zscore("ql:t:y", "jid") is not None
    assert get(lua)["tags"] == ["y"]


def test_reput_moves_between_queues(lua: Any, r: redis.Redis) -> None:
    """Remove the jid from the old queue's sets."""
    put(lua, delay=10)
    put(lua, "jid", "other")
    assert r.zscore(SCHED, "jid") is None
    assert r.zscore("ql:q:other-work", "jid") is not None
    assert get(lua)["queue"] == "other"


def test_reput_running_job_clears_the_lock(lua: Any, r: redis.Redis) -> None:
    """Drop the lock and the old owner's job entry when a running job is re-put."""
    put(lua)
    lua("pop", 0, "queue", "w1", 1)
    put(lua, worker="w2", now=1)
    job = get(lua)
    assert (job["state"], job["worker"], job["expires"]) == ("waiting", "", 0)
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore("ql:w:w1:jobs", "jid") is None
    assert r.zscore(WORK, "jid") is not None


def test_reput_complete_job(lua: Any, r: redis.Redis) -> None:
    """Remove a re-put completed job from `ql:completed`."""
    put(lua)
    lua("pop", 0, "queue", "worker", 1)
    lua("complete", 1, "jid", "worker", "queue", {})
    assert r.zscore("ql:completed", "jid") == 1
    put(lua, now=2)
    assert r.zscore("ql:completed", "jid") is None
    assert get(lua)["state"] == "waiting"


def test_reput_failed_job(lua: Any, r: redis.Redis) -> None:
    """Remove a re-put failed job from its failure group and drop the empty group."""
    put(lua)
    lua("pop", 0, "queue", "worker", 1)
    lua("fail", 1, "jid", "worker", "boom", "message")
    assert r.lrange("ql:f:boom", 0, -1) == ["jid"]
    put(lua, now=2)
    assert not r.exists("ql:f:boom")
    assert not r.sismember("ql:failures", "boom")
    assert get(lua)["state"] == "waiting"


def test_fix_reput_failed_job_decrements_original_queue_stats(lua: Any, r: redis.Redis) -> None:
    """Decrement `failed` in the queue the job failed in (docs/engine.md fix)."""
    put(lua)
    lua("pop", 0, "queue", "worker", 1)
    lua("fail", 1, "jid", "worker", "boom", "message")
    assert r.hget("ql:s:stats:0:queue", "failed") == "1"
    put(lua, "jid", "other", now=2)
    assert r.hget("ql:s:stats:0:queue", "failed") == "0"
    assert r.hget("ql:s:stats:0:other", "failed") in (None, "0")


def test_reput_resets_remaining(lua: Any, r: redis.Redis) -> None:
    """Restore the retry budget on put."""
    put(lua, retries=3)
    lua("pop", 0, "queue", "worker", 1)
    lua("retry", 1, "jid", "queue", "worker")
    assert get(lua)["remaining"] == 2
    put(lua, now=2)
    assert get(lua)["remaining"] == 3


def test_reput_appends_history(lua: Any) -> None:
    """Append one put entry per put."""
    put(lua, now=1)
    put(lua, "jid", "other", now=2)
    assert [(h["when"], h["q"]) for h in get(lua)["history"]] == [(1, "queue"), (2, "other")]


# -- requeue ------------------------------------------------------------------------------------


def test_requeue_missing_job(lua: Any) -> None:
    """Refuse to requeue a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Requeue\(\): Job nope does not exist"):
        lua("requeue", 0, "worker", "queue", "nope", "klass", {}, 0)


def test_requeue_moves_existing_job(lua: Any, r: redis.Redis) -> None:
    """Behave like put for an existing job."""
    put(lua)
    assert lua("requeue", 1, "worker", "other", "jid", "klass", {}, 0) == "jid"
    assert r.zscore("ql:q:other-work", "jid") is not None
    assert r.zscore(WORK, "jid") is None


def test_requeue_missing_job_writes_nothing(lua: Any, r: redis.Redis) -> None:
    """Leave the database empty after a refused requeue."""
    with pytest.raises(redis.ResponseError):
        lua("requeue", 0, "worker", "queue", "nope", "klass", {}, 0)
    assert r.keys("*") == []


# -- errors -------------------------------------------------------------------------------------


def test_put_delay_not_a_number(lua: Any) -> None:
    """Name the delay argument and its value."""
    with pytest.raises(redis.ResponseError, match=r'Put\(\): Arg "delay" not a number: x'):
        put(lua, delay="x")


def test_put_odd_pairs(lua: Any) -> None:
    """Refuse an odd number of trailing arguments."""
    with pytest.raises(redis.ResponseError):
        lua("put", 0, "worker", "queue", "jid", "klass", {}, 0, "priority")


@pytest.mark.parametrize("option", ["priority", "retries"])
def test_put_option_not_a_number(lua: Any, option: str) -> None:
    """Refuse non-numeric numeric options."""
    with pytest.raises(redis.ResponseError, match=rf'Put\(\): Arg "{option}"'):
        lua("put", 0, "worker", "queue", "jid", "klass", {}, 0, option, "x")


def test_put_collides_with_recurring_child(lua: Any, r: redis.Redis) -> None:
    """Refuse a jid shaped like a future child of an existing recurring job."""
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 60, 0)
    with pytest.raises(redis.ResponseError, match=r"Put\(\): Job rec-3 collides with recurring"):
        put(lua, "rec-3")
    assert not r.exists("ql:j:rec-3")


def test_reput_of_spawned_child_is_allowed(lua: Any, r: redis.Redis) -> None:
    """The recurring-collision rule only refuses jids that do not exist yet."""
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 60, 0)
    lua("peek", 0, "queue", 1)
    assert put(lua, "rec-1", "other", now=1) == "rec-1"
    assert r.zscore("ql:q:other-work", "rec-1") is not None


def test_put_into_paused_queue(lua: Any, r: redis.Redis) -> None:
    """Put still works on a paused queue."""
    lua("pause", 0, "queue")
    put(lua)
    assert r.zscore(WORK, "jid") is not None
