"""Our engine's extensions (docs/engine.md): wake-up channel, peek offset, jobs waiting/throttled,
reserve, complete.reserve and throttles. The deliberate fixes are tested next to the behaviour
they change (tests named `test_fix_*` in the test_protocol_* modules)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, delay: float = 0,
        **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", queue, jid, "klass", {}, delay, *pairs)


def running(lua: Any, jid: str = "jid", queue: str = "queue", now: float = 0) -> None:
    """Put and pop one job as `worker`."""
    put(lua, jid, queue, now=now)
    assert lua.json("pop", now, queue, "worker", 1)[0]["jid"] == jid


def wakes(events: Events) -> list[tuple[str, str]]:
    """Return only the wake-up events so far."""
    return [e for e in events() if e[0].startswith("ql:wake:")]


def empty(value: Any) -> bool:
    """True for an empty JSON list, whichever way it is encoded (`[]` or the cjson `{}`)."""
    return value in ([], {})


# -- wake-up channel ----------------------------------------------------------------------------


def test_wake_on_put(lua: Any, events: Events) -> None:
    """A put publishes the queue name once on ql:wake:<queue>."""
    put(lua)
    assert wakes(events) == [("ql:wake:queue", "queue")]


def test_no_wake_for_delayed_put(lua: Any, events: Events) -> None:
    """A delayed put makes nothing ready, so nothing wakes (our reading of 'become ready')."""
    put(lua, delay=10)
    assert wakes(events) == []


def test_wake_on_promotion(lua: Any, events: Events) -> None:
    """Promoting due scheduled jobs wakes the queue."""
    put(lua, "a", delay=10)
    put(lua, "b", delay=10)
    events()
    lua("queues", 10)
    assert wakes(events) == [("ql:wake:queue", "queue")]


def test_wake_on_retry(lua: Any, events: Events) -> None:
    """A retry back into work wakes the queue."""
    running(lua)
    events()
    lua("retry", 1, "jid", "queue", "worker")
    assert wakes(events) == [("ql:wake:queue", "queue")]


def test_wake_on_timeout(lua: Any, events: Events) -> None:
    """A timeout wakes the queue."""
    running(lua)
    events()
    lua("timeout", 1, "jid")
    assert wakes(events) == [("ql:wake:queue", "queue")]


def test_wake_on_unfail(lua: Any, events: Events) -> None:
    """Unfail wakes the target queue."""
    running(lua)
    lua("fail", 1, "jid", "worker", "grp", "msg")
    events()
    lua("unfail", 2, "other", "grp")
    assert wakes(events) == [("ql:wake:other", "other")]


def test_wake_on_dependency_release(lua: Any, events: Events) -> None:
    """Releasing a dependent wakes its queue."""
    running(lua)
    put(lua, "child", "elsewhere", depends=["jid"])
    events()
    lua("complete", 1, "jid", "worker", "queue", {})
    assert ("ql:wake:elsewhere", "elsewhere") in wakes(events)


def test_wake_on_advance(lua: Any, events: Events) -> None:
    """complete-next wakes the next queue."""
    running(lua)
    events()
    lua("complete", 1, "jid", "worker", "queue", {}, "next", "later")
    assert wakes(events) == [("ql:wake:later", "later")]


def test_wake_on_unpause(lua: Any, events: Events) -> None:
    """Unpausing a queue with waiting jobs wakes it."""
    lua("pause", 0, "queue")
    put(lua)
    events()
    lua("unpause", 0, "queue")
    assert wakes(events) == [("ql:wake:queue", "queue")]


def test_wake_on_recur_spawn(lua: Any, events: Events) -> None:
    """Spawning recurring children wakes the queue once."""
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 60, 0)
    events()
    lua("peek", 200, "queue", 10)
    assert wakes(events) == [("ql:wake:queue", "queue")]


@pytest.mark.parametrize("command,args", [("cancel", ["jid"]), ("priority", ["jid", 1]),
                                          ("pause", ["queue"]), ("get", ["jid"])])
def test_no_wake(lua: Any, events: Events, command: str, args: list[Any]) -> None:
    """Commands that make nothing ready do not wake."""
    put(lua)
    events()
    lua(command, 1, *args)
    assert wakes(events) == []


# -- peek offset, jobs waiting / throttled ------------------------------------------------------


def test_peek_offset(lua: Any) -> None:
    """Page through waiting jobs in pop order."""
    for n in range(5):
        put(lua, f"j{n}", now=n)
    assert [j["jid"] for j in lua.json("peek", 10, "queue", 2, 1)] == ["j1", "j2"]
    assert [j["jid"] for j in lua.json("peek", 10, "queue", 2, 0)] == ["j0", "j1"]
    assert lua("peek", 10, "queue", 2, 5) == "{}"


def test_jobs_waiting(lua: Any) -> None:
    """List waiting jids in pop order, with paging, as a RESP array."""
    put(lua, "low", now=0, priority=-1)
    put(lua, "a", now=1)
    put(lua, "high", now=2, priority=3)
    assert lua("jobs", 5, "waiting", "queue") == ["high", "a", "low"]
    assert lua("jobs", 5, "waiting", "queue", 1, 1) == ["a"]
    assert lua("jobs", 5, "waiting", "nothing") == []


# -- reserve ------------------------------------------------------------------------------------


def test_reserve_takes_lean_jobs(lua: Any, r: redis.Redis) -> None:
    """Pop across queues in order; lean objects lack history and dependency lists."""
    put(lua, "a", "q1")
    put(lua, "b", "q2")
    put(lua, "c", "q2", now=1)
    reply = lua.json("reserve", 5, "worker", 2, "q1", "q2")
    assert [j["jid"] for j in reply["jobs"]] == ["a", "b"]
    assert "wake" not in reply
    for job in reply["jobs"]:
        assert job["state"] == "running" and job["worker"] == "worker"
        assert not {"history", "dependents", "dependencies"} & set(job)
    assert r.zscore("ql:q:q1-locks", "a") == 65
    assert r.zscore("ql:workers", "worker") == 5
    assert lua.json("get", 5, "a")["history"][-1] == {"when": 5, "what": "popped",
                                                      "worker": "worker"}


def test_reserve_nothing_reports_wake(lua: Any) -> None:
    """With nothing to take, `wake` is -1 when nothing is pending."""
    reply = lua.json("reserve", 0, "worker", 1, "q1")
    assert empty(reply["jobs"])
    assert reply["wake"] == -1


@pytest.mark.parametrize("setup,expected", [
    ("scheduled", 20), ("recurring", 40), ("lock", 50), ("earliest", 20)])
def test_reserve_wake_seconds(lua: Any, setup: str, expected: float) -> None:
    """`wake` is the time until the earliest scheduled job, recurring spawn or lock expiry."""
    if setup in ("lock", "earliest"):
        running(lua, "held", "q2")
    if setup in ("scheduled", "earliest"):
        put(lua, "later", "q1", delay=30)
    if setup == "recurring":
        lua("recur", 0, "q2", "rec", "klass", {}, "interval", 60, 50)
    reply = lua.json("reserve", 10, "other", 1, "q1", "q2")
    assert empty(reply["jobs"])
    assert reply["wake"] == pytest.approx(expected)


def test_reserve_skips_paused(lua: Any) -> None:
    """Paused queues are skipped."""
    put(lua, "a", "q1")
    put(lua, "b", "q2")
    lua("pause", 0, "q1")
    assert [j["jid"] for j in lua.json("reserve", 1, "worker", 5, "q1", "q2")["jobs"]] == ["b"]


def test_reserve_handles_expired_locks(lua: Any) -> None:
    """Reserve runs lock expiry like pop (courtesy notice first)."""
    running(lua, "a", "q1")
    assert empty(lua.json("reserve", 61, "w2", 1, "q1")["jobs"])
    assert [j["jid"] for j in lua.json("reserve", 71, "w2", 1, "q1")["jobs"]] == ["a"]


def test_reserve_too_many_queues(lua: Any, r: redis.Redis) -> None:
    """At most 100 queues per call."""
    with pytest.raises(redis.ResponseError, match="at most 100 queues"):
        lua("reserve", 0, "worker", 1, *[f"q{n}" for n in range(101)])
    assert r.keys("*") == []


def test_complete_reserve(lua: Any) -> None:
    """Complete one job and take the next in one call."""
    running(lua, "a")
    put(lua, "b", now=1)
    reply = lua.json("complete.reserve", 2, "a", "worker", "queue", {}, "", 1, "queue")
    assert reply["state"] == "complete"
    assert [j["jid"] for j in reply["jobs"]] == ["b"]
    assert lua.json("get", 2, "a")["state"] == "complete"


def test_complete_reserve_count_zero(lua: Any) -> None:
    """Count 0 only completes."""
    running(lua, "a")
    put(lua, "b", now=1)
    reply = lua.json("complete.reserve", 2, "a", "worker", "queue", {}, "", 0, "queue")
    assert reply["state"] == "complete"
    assert empty(reply["jobs"])
    assert lua.json("get", 2, "b")["state"] == "waiting"


def test_complete_reserve_refused_takes_nothing(lua: Any) -> None:
    """A refused completion reserves nothing."""
    running(lua, "a")
    put(lua, "b", now=1)
    with pytest.raises(redis.ResponseError, match="another worker"):
        lua("complete.reserve", 2, "a", "thief", "queue", {}, "", 1, "queue")
    assert lua.json("get", 2, "b")["state"] == "waiting"


# -- throttles ----------------------------------------------------------------------------------


def test_throttle_set_get_delete(lua: Any, r: redis.Redis) -> None:
    """Store {id, maximum} in `ql:th:<tid>`; get reports ttl; delete drops the hash."""
    assert lua("throttle.set", 0, "tid", 3) is None
    assert r.hgetall("ql:th:tid") == {"id": "tid", "maximum": "3"}
    assert lua.json("throttle.get", 0, "tid") == {"id": "tid", "maximum": 3, "ttl": -1}
    assert lua("throttle.delete", 0, "tid") is None
    assert not r.exists("ql:th:tid")


def test_throttle_ttl(lua: Any, r: redis.Redis) -> None:
    """A positive ttl sets an EXPIRE."""
    lua("throttle.set", 0, "tid", 3, 100)
    assert 0 < r.ttl("ql:th:tid") <= 100


def test_throttle_get_unknown(lua: Any) -> None:
    """An unknown throttle reports maximum 0 and ttl -2."""
    assert lua.json("throttle.get", 0, "nope") == {"id": "nope", "maximum": 0, "ttl": -2}


def test_throttled_job(lua: Any, r: redis.Redis) -> None:
    """A job that cannot acquire its throttle waits in `-throttled` and the pending set."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "a", now=0, throttles=["tid"])
    put(lua, "b", now=1, throttles=["tid"])
    assert [j["jid"] for j in lua.json("pop", 2, "queue", "worker", 2)] == ["a"]
    assert lua.json("get", 2, "b")["state"] == "throttled"
    assert r.zscore("ql:q:queue-throttled", "b") is not None
    assert lua("throttle.locks", 2, "tid") == ["a"]
    assert lua("throttle.pending", 2, "tid") == ["b"]
    assert lua("jobs", 2, "throttled", "queue") == ["b"]
    assert lua.json("queues", 2, "queue")["throttled"] == 1
    assert lua.json("get", 2, "a")["throttles"] == ["tid"]


@pytest.mark.parametrize("action", ["complete", "fail", "retry", "cancel", "timeout"])
def test_throttle_released(lua: Any, r: redis.Redis, action: str) -> None:
    """Releasing the holder moves a pending job back to work."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "a", now=0, throttles=["tid"])
    put(lua, "b", now=1, throttles=["tid"])
    lua("pop", 2, "queue", "worker", 2)
    table: dict[str, list[Any]] = {
        "complete": ["a", "worker", "queue", {}], "fail": ["a", "worker", "g", "m"],
        "retry": ["a", "queue", "worker", 100], "cancel": ["a"], "timeout": ["a"]}
    args = table[action]
    lua(action, 3, *args)
    assert lua("throttle.locks", 3, "tid") == []
    assert lua.json("get", 3, "b")["state"] == "waiting"
    assert r.zscore("ql:q:queue-work", "b") is not None
    assert r.zscore("ql:q:queue-throttled", "b") is None


def test_throttle_unlimited(lua: Any) -> None:
    """Maximum 0 means unlimited."""
    lua("throttle.set", 0, "tid", 0)
    for n in range(3):
        put(lua, f"j{n}", now=n, throttles=["tid"])
    assert len(lua.json("pop", 5, "queue", "worker", 3)) == 3


def test_queue_throttle(lua: Any, r: redis.Redis) -> None:
    """The queue throttle `ql:q:<queue>` caps every job of the queue."""
    assert lua("queue.throttle.set", 0, "queue", 1) is None
    assert r.hget("ql:th:ql:q:queue", "maximum") == "1"
    got = lua.json("queue.throttle.get", 0, "queue")
    assert (got["id"], got["maximum"]) == ("ql:q:queue", 1)
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    assert len(lua.json("pop", 2, "queue", "worker", 2)) == 1


def test_throttle_release_command(lua: Any) -> None:
    """throttle.release drops jids from locks without moving jobs."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "a", throttles=["tid"])
    lua("pop", 1, "queue", "worker", 1)
    assert lua("throttle.release", 2, "tid", "a") is None
    assert lua("throttle.locks", 2, "tid") == []
    assert lua.json("get", 2, "a")["state"] == "running"


def test_reserve_spawns_and_promotes(lua: Any) -> None:
    """Reserve spawns recurring children and promotes scheduled jobs like pop."""
    lua("recur", 0, "q1", "rec", "klass", {}, "interval", 60, 0)
    put(lua, "later", "q2", delay=5)
    reply = lua.json("reserve", 10, "worker", 5, "q1", "q2")
    assert sorted(j["jid"] for j in reply["jobs"]) == ["later", "rec-1"]


def test_reserve_honours_max_concurrency(lua: Any) -> None:
    """Reserve respects `<queue>-max-concurrency`."""
    lua("config.set", 0, "q1-max-concurrency", 1)
    put(lua, "a", "q1")
    put(lua, "b", "q1", now=1)
    put(lua, "c", "q2", now=2)
    reply = lua.json("reserve", 5, "worker", 5, "q1", "q2")
    assert [j["jid"] for j in reply["jobs"]] == ["a", "c"]


def test_throttle_released_on_retries_exhausted(lua: Any) -> None:
    """A job failed by lock loss releases its throttle and frees the pending job."""
    lua("config.set", 0, "grace-period", 0)
    lua("throttle.set", 0, "tid", 1)
    lua("put", 0, "worker", "queue", "a", "klass", {}, 0, "throttles", ["tid"], "retries", 0)
    put(lua, "b", now=1, throttles=["tid"])
    lua("pop", 2, "queue", "worker", 2)
    assert lua.json("get", 2, "b")["state"] == "throttled"
    jobs = lua.json("pop", 100, "queue", "w2", 1)
    assert lua.json("get", 100, "a")["state"] == "failed"
    assert [j["jid"] for j in jobs] == ["b"]
    assert lua("throttle.locks", 100, "tid") == ["b"]


def test_throttle_released_when_moved_by_put(lua: Any) -> None:
    """Re-putting a running job releases its throttle."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "a", throttles=["tid"])
    put(lua, "b", now=1, throttles=["tid"])
    lua("pop", 2, "queue", "worker", 2)
    put(lua, "a", "other", now=3)
    assert lua("throttle.locks", 3, "tid") == []
    assert lua.json("get", 3, "b")["state"] == "waiting"


def test_pop_looks_past_throttled_jobs(lua: Any) -> None:
    """Pop keeps looking after a throttled candidate (bounded by count x 2)."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "holder", throttles=["tid"])
    lua("pop", 0, "queue", "worker", 1)
    put(lua, "blocked", now=1, throttles=["tid"])
    put(lua, "free", now=2)
    assert [j["jid"] for j in lua.json("pop", 3, "queue", "worker", 1)] == ["free"]
    assert lua.json("get", 3, "blocked")["state"] == "throttled"


def test_throttle_release_moves_free_slots_only(lua: Any) -> None:
    """A release moves at most (maximum - held) pending jobs back to work."""
    lua("throttle.set", 0, "tid", 2)
    for n, jid in enumerate(["a", "b", "c", "d", "e"]):
        put(lua, jid, now=n, throttles=["tid"])
    assert [j["jid"] for j in lua.json("pop", 10, "queue", "worker", 2)] == ["a", "b"]
    assert lua.json("pop", 11, "queue", "worker", 3) == {}
    assert sorted(lua("throttle.pending", 11, "tid")) == ["c", "d", "e"]
    lua("complete", 12, "a", "worker", "queue", {})
    states = {j: lua.json("get", 12, j)["state"] for j in ("c", "d", "e")}
    assert sorted(states.values()) == ["throttled", "throttled", "waiting"]
    assert [j["jid"] for j in lua.json("pop", 13, "queue", "worker", 3)] == [
        k for k, v in states.items() if v == "waiting"]


def test_recurring_children_carry_throttles(lua: Any) -> None:
    """The recur option `throttles` is applied to spawned children."""
    lua("throttle.set", 0, "tid", 1)
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 60, 0, "throttles", ["tid"])
    jobs = lua.json("pop", 130, "queue", "worker", 3)
    assert [j["jid"] for j in jobs] == ["rec-1"]
    assert jobs[0]["throttles"] == ["tid"]
    assert lua("jobs", 130, "throttled", "queue") != []


def test_wake_once_per_queue_per_call(lua: Any, events: Events) -> None:
    """Promoting several jobs in two queues wakes each queue once."""
    for n in range(3):
        put(lua, f"a{n}", "qa", delay=5)
        put(lua, f"b{n}", "qb", delay=5)
    events()
    lua("queues", 10)
    assert sorted(wakes(events)) == [("ql:wake:qa", "qa"), ("ql:wake:qb", "qb")]


def test_reserve_wake_after_lock_released(lua: Any) -> None:
    """Once the only lock is released, nothing is pending: `wake` is -1."""
    put(lua, "a", "q1")
    assert [j["jid"] for j in lua.json("reserve", 0, "worker", 1, "q1")["jobs"]] == ["a"]
    lua("complete", 1, "a", "worker", "q1", {})
    assert lua.json("reserve", 2, "worker", 1, "q1")["wake"] == -1


def test_reserve_wake_after_scheduled_job_canceled(lua: Any) -> None:
    """A canceled scheduled job no longer counts for `wake`."""
    put(lua, "later", "q1", delay=30)
    put(lua, "much-later", "q1", delay=100)
    assert lua.json("reserve", 1, "worker", 1, "q1")["wake"] == pytest.approx(29)
    lua("cancel", 2, "later")
    assert lua.json("reserve", 3, "worker", 1, "q1")["wake"] == pytest.approx(97)


def test_queue_throttle_set_through_generic_command(lua: Any) -> None:
    """`throttle.set ql:q:<queue>` is the queue throttle too (same id, same key)."""
    lua("throttle.set", 0, "ql:q:queue", 1)
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    assert len(lua.json("pop", 2, "queue", "worker", 2)) == 1


def test_queue_throttle_deleted(lua: Any) -> None:
    """Deleting the queue throttle lifts the cap."""
    lua("queue.throttle.set", 0, "queue", 1)
    lua("throttle.delete", 0, "ql:q:queue")
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    assert len(lua.json("pop", 2, "queue", "worker", 2)) == 2


def test_unlimited_release_moves_ten(lua: Any, r: redis.Redis) -> None:
    """A release of an unlimited throttle moves at most 10 pending jobs back."""
    lua("throttle.set", 0, "tid", 1)
    put(lua, "a", throttles=["tid"])
    lua("pop", 0, "queue", "worker", 1)
    for n in range(1, 13):
        put(lua, f"p{n:02d}", now=n, throttles=["tid"])
    assert lua.json("pop", 20, "queue", "worker", 12) == {}
    assert len(lua("throttle.pending", 20, "tid")) == 12
    # Make the throttle unlimited behind the engine's back, so only the release admits.
    r.hset("ql:th:tid", "maximum", 0)
    lua("complete", 22, "a", "worker", "queue", {})
    assert len(lua("jobs", 22, "waiting", "queue")) == 10
    assert len(lua("jobs", 22, "throttled", "queue")) == 2


def test_raising_throttle_maximum_admits_pending(lua: Any) -> None:
    """Raising a throttle's maximum lets pending jobs go (at most the new free room)."""
    lua("throttle.set", 0, "tid", 1)
    for n in range(4):
        put(lua, f"j{n}", now=n, throttles=["tid"])
    assert len(lua.json("pop", 5, "queue", "worker", 4)) == 1
    lua("throttle.set", 6, "tid", 3)
    assert len(lua("jobs", 6, "waiting", "queue")) == 2


def test_queue_throttle_written_by_another_writer(lua: Any, r: redis.Redis) -> None:
    """A queue throttle hash written directly (as reqless does) caps the queue."""
    put(lua, "a", now=0)
    assert len(lua.json("pop", 1, "queue", "worker", 5)) == 1
    r.hset("ql:th:ql:q:queue", mapping={"id": "ql:q:queue", "maximum": 1})
    put(lua, "b", now=2)
    put(lua, "c", now=3)
    # "a" was popped before the throttle existed, so it holds no slot.
    assert [j["jid"] for j in lua.json("pop", 4, "queue", "worker", 5)] == ["b"]
    assert lua.json("get", 4, "c")["state"] == "throttled"


def test_complete_reserve_events_match_complete(lua: Any, events: Events) -> None:
    """complete.reserve publishes what complete and pop would (tracked jobs)."""
    running(lua, "a")
    lua("track", 0, "track", "a")
    put(lua, "b", now=1)
    lua("track", 1, "track", "b")
    events()
    lua("complete.reserve", 2, "a", "worker", "queue", {}, "", 1, "queue")
    got = [e for e in events() if not e[0].startswith("ql:wake:")]
    assert got == [("ql:completed", "a"),
                   ("ql:log", '{"jid":"a","event":"completed","queue":"queue"}'),
                   ("ql:popped", "b")]


def test_reserve_records_wait_and_run_stats(lua: Any) -> None:
    """Reserve and complete.reserve write the same statistics as pop and complete."""
    put(lua, "a", now=0)
    put(lua, "b", now=2)
    lua("reserve", 4, "worker", 1, "queue")
    lua("complete.reserve", 10, "a", "worker", "queue", {}, "", 1, "queue")
    stats = lua.json("stats", 10, "queue", 0)
    assert (stats["wait"]["count"], stats["wait"]["mean"]) == (2, 6)
    assert (stats["run"]["count"], stats["run"]["mean"]) == (1, 6)
