"""Conformance of `pop` and `peek`."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

__all__: list[str] = []

WORK = "ql:q:queue-work"
LOCKS = "ql:q:queue-locks"
SCHED = "ql:q:queue-scheduled"


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, delay: float = 0,
        **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", queue, jid, "klass", {}, delay, *pairs)


def pop(lua: Any, now: float = 0, count: int = 1, worker: str = "worker",
        queue: str = "queue") -> Any:
    """Pop and decode."""
    return lua.json("pop", now, queue, worker, count)


def peek(lua: Any, now: float = 0, count: int = 1, queue: str = "queue") -> Any:
    """Peek and decode."""
    return lua.json("peek", now, queue, count)


# -- pop ----------------------------------------------------------------------------------------


def test_pop_empty_queue_is_empty_object(lua: Any) -> None:
    """Reply `{}` (the cjson quirk) when nothing is available."""
    assert lua("pop", 0, "queue", "worker", 1) == "{}"


def test_pop_returns_job_objects(lua: Any) -> None:
    """Reply with a JSON array of full job objects."""
    put(lua)
    jobs = pop(lua, now=10)
    assert isinstance(jobs, list) and len(jobs) == 1
    job = jobs[0]
    assert job["jid"] == "jid"
    assert job["state"] == "running"
    assert job["worker"] == "worker"
    assert job["expires"] == 70
    assert job["queue"] == "queue"


def test_pop_takes_the_lock(lua: Any, r: redis.Redis) -> None:
    """Represent the lock in the hash, the queue's locks and the worker's jobs."""
    put(lua)
    pop(lua, now=10)
    assert r.zscore(LOCKS, "jid") == 70
    assert r.zscore("ql:w:worker:jobs", "jid") == 70
    assert r.zscore(WORK, "jid") is None
    assert r.hget("ql:j:jid", "state") == "running"
    assert r.hget("ql:j:jid", "worker") == "worker"
    assert float(str(r.hget("ql:j:jid", "expires"))) == 70
    assert r.type(LOCKS) == "zset"
    assert r.type("ql:w:worker:jobs") == "zset"


def test_pop_registers_worker(lua: Any, r: redis.Redis) -> None:
    """Record the worker's last-seen time in `ql:workers`."""
    pop(lua, now=1700000000.5)
    assert r.zscore("ql:workers", "worker") == 1700000000.5


def test_pop_writes_history(lua: Any) -> None:
    """Append `{what: popped, worker}` at floor(now)."""
    put(lua)
    pop(lua, now=12.9)
    history = lua.json("get", 13, "jid")["history"]
    assert history[-1] == {"when": 12, "what": "popped", "worker": "worker"}


def test_pop_sets_time(lua: Any, r: redis.Redis) -> None:
    """Set the hash `time` field to the pop time."""
    put(lua, now=1)
    pop(lua, now=1700000000.25)
    assert float(str(r.hget("ql:j:jid", "time"))) == 1700000000.25


@pytest.mark.parametrize("count", [1, 2, 5])
def test_pop_count(lua: Any, count: int) -> None:
    """Return at most `count` jobs."""
    for n in range(4):
        put(lua, f"j{n}", now=n)
    jobs = pop(lua, now=10, count=count)
    assert [j["jid"] for j in jobs] == [f"j{n}" for n in range(min(count, 4))]


def test_pop_does_not_return_running_jobs_twice(lua: Any) -> None:
    """A popped job is no longer in the work set."""
    put(lua)
    assert len(pop(lua)) == 1
    assert pop(lua, worker="other") == {}


def test_pop_unknown_queue_registers_worker(lua: Any, r: redis.Redis) -> None:
    """Popping from a queue nobody used is fine and still registers the worker."""
    assert pop(lua, now=3, queue="nothing") == {}
    assert r.zscore("ql:workers", "worker") == 3
    assert r.zscore("ql:queues", "nothing") is None


def test_pop_custom_heartbeat(lua: Any, r: redis.Redis) -> None:
    """Use the global heartbeat option for the lock length."""
    lua("config.set", 0, "heartbeat", 30)
    put(lua)
    assert pop(lua, now=5)[0]["expires"] == 35
    assert r.zscore(LOCKS, "jid") == 35


def test_pop_queue_heartbeat_overrides(lua: Any) -> None:
    """Prefer `<queue>-heartbeat` over `heartbeat`."""
    lua("config.set", 0, "heartbeat", 30)
    lua("config.set", 0, "queue-heartbeat", 7)
    put(lua)
    put(lua, "other", "q2")
    assert pop(lua, now=5)[0]["expires"] == 12
    assert pop(lua, now=5, queue="q2")[0]["expires"] == 35


def test_pop_paused_queue(lua: Any, r: redis.Redis) -> None:
    """Return `{}` from a paused queue without registering the worker."""
    put(lua)
    lua("pause", 0, "queue")
    assert lua("pop", 1, "queue", "worker", 1) == "{}"
    assert r.zscore("ql:workers", "worker") is None
    assert r.zscore(WORK, "jid") is not None
    lua("unpause", 0, "queue")
    assert pop(lua, now=2)[0]["jid"] == "jid"


def test_pop_promotes_due_scheduled(lua: Any, r: redis.Redis) -> None:
    """Move due scheduled jobs into work at pop time."""
    put(lua, now=0, delay=10)
    assert pop(lua, now=9) == {}
    jobs = pop(lua, now=10)
    assert [j["jid"] for j in jobs] == ["jid"]
    assert r.zscore(SCHED, "jid") is None


def test_pop_promotion_scores_with_promotion_time(lua: Any) -> None:
    """A promoted job queues behind jobs put before the promotion."""
    put(lua, "late", now=0, delay=5)
    put(lua, "early", now=4)
    jobs = pop(lua, now=6, count=2)
    assert [j["jid"] for j in jobs] == ["early", "late"]


def test_pop_promotes_at_most_count(lua: Any, r: redis.Redis) -> None:
    """Promote only as many scheduled jobs as are still wanted."""
    for n in range(3):
        put(lua, f"j{n}", now=0, delay=1 + n)
    assert len(pop(lua, now=10, count=1)) == 1
    assert r.zcard(SCHED) == 2


def test_peek_reports_state_after_promotion(lua: Any) -> None:
    """A promoted job reads back as waiting."""
    put(lua, now=0, delay=10)
    assert lua.json("get", 0, "jid")["state"] == "scheduled"
    peek(lua, now=11)
    assert lua.json("get", 11, "jid")["state"] == "waiting"


def test_pop_max_concurrency(lua: Any) -> None:
    """Cap the number of live locks in a queue."""
    lua("config.set", 0, "queue-max-concurrency", 2)
    for n in range(4):
        put(lua, f"j{n}", now=n)
    assert len(pop(lua, now=5, count=5)) == 2
    assert pop(lua, now=6, count=5) == {}
    lua("complete", 7, "j0", "worker", "queue", {})
    assert [j["jid"] for j in pop(lua, now=8, count=5)] == ["j2"]


def test_pop_max_concurrency_ignores_expired_locks(lua: Any) -> None:
    """Expired locks do not count against the cap."""
    lua("config.set", 0, "queue-max-concurrency", 1)
    lua("config.set", 0, "grace-period", 0)
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    assert [j["jid"] for j in pop(lua, now=2)] == ["a"]
    # a's lock (62) has expired at 100: it is re-dispatched within the cap of 1.
    assert [j["jid"] for j in pop(lua, now=100, worker="w2")] == ["a"]


def test_pop_lowering_concurrency_keeps_running_jobs(lua: Any, r: redis.Redis) -> None:
    """Lowering the cap never revokes locks."""
    for n in range(3):
        put(lua, f"j{n}", now=n)
    pop(lua, now=5, count=3)
    lua("config.set", 0, "queue-max-concurrency", 1)
    assert pop(lua, now=6) == {}
    assert r.zcard(LOCKS) == 3


def test_fix_pop_skips_ghost_jids(lua: Any, r: redis.Redis) -> None:
    """Skip and remove a jid in the work set without a job hash (docs/engine.md fix)."""
    put(lua, "real", now=1)
    r.zadd(WORK, {"ghost": 10})
    jobs = pop(lua, now=2, count=2)
    assert [j["jid"] for j in jobs] == ["real"]
    assert r.zscore(WORK, "ghost") is None


# -- peek ---------------------------------------------------------------------------------------


def test_peek_empty(lua: Any) -> None:
    """Reply `{}` for an empty queue."""
    assert lua("peek", 0, "queue", 5) == "{}"


def test_peek_does_not_lock(lua: Any, r: redis.Redis) -> None:
    """Return waiting jobs without locks, workers, history or time changes."""
    put(lua, now=1)
    before = r.hgetall("ql:j:jid")
    jobs = peek(lua, now=5)
    assert [j["jid"] for j in jobs] == ["jid"]
    assert jobs[0]["state"] == "waiting"
    assert r.hgetall("ql:j:jid") == before
    assert r.zcard("ql:workers") == 0
    # (storage detail updated: the first put is in the compact `history` field, no list)
    assert not r.exists("ql:j:jid-history")
    assert jobs[0]["history"] == [{"when": 1, "what": "put", "q": "queue"}]
    assert r.zscore(WORK, "jid") is not None


def test_peek_order_matches_pop(lua: Any) -> None:
    """Peek in the order pop would take."""
    put(lua, "low", now=0, priority=-1)
    put(lua, "a", now=1)
    put(lua, "high", now=2, priority=5)
    put(lua, "b", now=3)
    assert [j["jid"] for j in peek(lua, now=4, count=10)] == ["high", "a", "b", "low"]
    assert [j["jid"] for j in pop(lua, now=4, count=10)] == ["high", "a", "b", "low"]


def test_peek_ignores_pause(lua: Any) -> None:
    """Peek still works on a paused queue."""
    put(lua)
    lua("pause", 0, "queue")
    assert [j["jid"] for j in peek(lua)] == ["jid"]


def test_peek_ignores_max_concurrency(lua: Any) -> None:
    """Peek is not capped by max-concurrency."""
    lua("config.set", 0, "queue-max-concurrency", 1)
    for n in range(3):
        put(lua, f"j{n}", now=n)
    pop(lua, now=5)
    assert len(peek(lua, now=5, count=5)) == 2


def test_peek_promotes_scheduled(lua: Any, r: redis.Redis) -> None:
    """Peek promotes due scheduled jobs as a side effect."""
    put(lua, now=0, delay=10)
    assert peek(lua, now=5) == {}
    assert [j["jid"] for j in peek(lua, now=10)] == ["jid"]
    assert r.zscore(SCHED, "jid") is None
    assert r.zscore(WORK, "jid") is not None


def test_peek_shows_expired_locks_first(lua: Any) -> None:
    """List expired-lock jobs first, still running and not invalidated."""
    put(lua, "stale", now=0)
    pop(lua, now=0)
    put(lua, "fresh", now=1, priority=10)
    jobs = peek(lua, now=100, count=5)
    assert [j["jid"] for j in jobs] == ["stale", "fresh"]
    assert jobs[0]["state"] == "running"
    assert jobs[0]["worker"] == "worker"
    assert lua.json("get", 100, "stale")["remaining"] == 5


def test_peek_count_zero(lua: Any) -> None:
    """Count 0 is allowed for peek and returns nothing."""
    put(lua)
    assert lua("peek", 0, "queue", 0) == "{}"


def test_pop_honours_paused_set_written_directly(lua: Any, r: redis.Redis) -> None:
    """Honour a pause found in `ql:paused_queues`."""
    # E.g. a queue paused by qless-core (which only SADDs the set) before the switch.
    put(lua)
    r.sadd("ql:paused_queues", "queue")
    assert lua("pop", 1, "queue", "worker", 1) == "{}"
    assert lua.json("queues", 1, "queue")["paused"] is True
    lua("unpause", 2, "queue")
    assert pop(lua, now=3)[0]["jid"] == "jid"


def test_pop_promotes_scheduled_written_directly(lua: Any, r: redis.Redis) -> None:
    """Jobs scheduled before the switch to this engine are promoted when due."""
    assert pop(lua, now=0) == {}
    r.hset("ql:j:old", mapping={"jid": "old", "klass": "klass", "data": "{}", "priority": 0,
                                "tags": "{}", "state": "scheduled", "worker": "", "expires": 0,
                                "queue": "queue", "retries": 5, "remaining": 5, "time": "0"})
    r.zadd(SCHED, {"old": 5})
    assert [j["jid"] for j in pop(lua, now=6)] == ["old"]


def test_pop_notices_expired_lock_written_directly(lua: Any, r: redis.Redis) -> None:
    """A lock taken by another writer (e.g. a qless-core worker) is noticed when it expires."""
    assert pop(lua, now=0) == {}
    r.hset("ql:j:old", mapping={"jid": "old", "klass": "klass", "data": "{}", "priority": 0,
                                "tags": "{}", "state": "running", "worker": "gone",
                                "expires": 60, "queue": "queue", "retries": 5, "remaining": 5,
                                "time": "0"})
    r.zadd(LOCKS, {"old": 60})
    r.zadd("ql:w:gone:jobs", {"old": 60})
    assert pop(lua, now=61, worker="w2") == {}
    assert lua.json("get", 61, "old")["history"][-1]["what"] == "timed-out"


def test_pop_honours_pause_added_after_unpause(lua: Any, r: redis.Redis) -> None:
    """Honour a pause written by another writer after this engine unpaused the queue."""
    # qless-core's pause is a plain SADD.
    put(lua)
    lua("pause", 0, "queue")
    lua("unpause", 0, "queue")
    r.sadd("ql:paused_queues", "queue")
    assert lua("pop", 1, "queue", "worker", 1) == "{}"


def test_pop_honours_unpause_by_another_writer(lua: Any, r: redis.Redis) -> None:
    """An unpause written by another writer (SREM, as qless-core does) lets pops through."""
    put(lua)
    lua("pause", 0, "queue")
    r.srem("ql:paused_queues", "queue")
    assert [j["jid"] for j in pop(lua, now=1)] == ["jid"]


# Every pop examines locks, spawns and schedules: sub-second timers must not be missed
# because an earlier idle pop looked at the queue a moment before.


def test_subsecond_delayed_put_after_idle_pop(lua: Any) -> None:
    """A 0.5 s delay put right after an idle pop is taken 0.5 s later."""
    assert pop(lua, now=0) == {}
    put(lua, now=0.05, delay=0.5)
    assert [j["jid"] for j in pop(lua, now=0.6)] == ["jid"]


def test_subsecond_retry_delay_after_pop(lua: Any) -> None:
    """A job retried with a 0.3 s delay is taken once that has passed."""
    put(lua)
    pop(lua, now=0)
    lua("retry", 0.1, "jid", "queue", "worker", 0.3)
    assert [j["jid"] for j in pop(lua, now=0.5)] == ["jid"]


def test_subsecond_advance_delay_after_idle_pop(lua: Any) -> None:
    """complete-next with a 0.3 s delay into an idle-polled queue is taken in time."""
    put(lua, "jid", "first")
    lua("pop", 0, "first", "worker", 1)
    assert pop(lua, now=0) == {}
    lua("complete", 0.1, "jid", "worker", "first", {}, "next", "queue", "delay", 0.3)
    assert [j["jid"] for j in pop(lua, now=0.5)] == ["jid"]


def test_subsecond_dependency_release_after_idle_pop(lua: Any) -> None:
    """A released dependent with a remembered 0.4 s delay is taken in time."""
    put(lua, "a", "first")
    lua("put", 0, "worker", "queue", "b", "klass", {}, 0.4, "depends", ["a"])
    lua("pop", 0, "first", "worker", 1)
    assert pop(lua, now=0) == {}
    lua("complete", 0.1, "a", "worker", "first", {})
    assert [j["jid"] for j in pop(lua, now=0.5)] == ["b"]


def test_subsecond_recur_update_interval_after_idle_pop(lua: Any) -> None:
    """Shortening the interval makes an earlier spawn time count at once."""
    lua("recur", 0, "queue", "rec", "klass", {}, "interval", 100, 99.2)
    assert pop(lua, now=0) == {}
    lua("recur.update", 0.1, "rec", "interval", 1)
    assert [j["jid"] for j in pop(lua, now=0.5)] == ["rec-1"]


def test_subsecond_recur_moved_into_idle_queue(lua: Any) -> None:
    """A schedule moved into a queue that was just polled spawns in time."""
    lua("recur", 0, "other", "rec", "klass", {}, "interval", 60, 0.3)
    assert pop(lua, now=0) == {}
    lua("recur.update", 0.1, "rec", "queue", "queue")
    assert [j["jid"] for j in pop(lua, now=0.5)] == ["rec-1"]


def test_fix_peek_skips_ghost_jids(lua: Any, r: redis.Redis) -> None:
    """Peek omits a jid in the work set without a job hash (docs/engine.md fix)."""
    put(lua, "real", now=1)
    r.zadd(WORK, {"ghost": 10})
    assert [j["jid"] for j in peek(lua, now=2, count=5)] == ["real"]


def test_pop_by_slightly_slower_clock_promotes_due_jobs(lua: Any) -> None:
    """A pop examines schedules in [0, now] even just after a pop with a later clock."""
    put(lua, "a", now=0, delay=10)
    put(lua, "b", now=0, delay=10)
    assert len(pop(lua, now=100)) == 1
    # A second worker whose clock is 0.5 s behind: b (due at 10) is due for it as well.
    assert len(pop(lua, now=99.5, worker="w2")) == 1


@pytest.mark.parametrize("now", [1700000000.123456, "1700000000.5", "1.7e9", 1700000000])
def test_pop_writes_times_as_redis_formats_numbers(lua: Any, r: redis.Redis,
                                                   now: float | str) -> None:
    """Expiry, lock and worker scores are exactly those of the numbers, however `now` is written.

    The engine hands some of them to Redis as text it formatted (or the caller's own `now`
    text) instead of as numbers: the stored values must not differ.
    """
    put(lua, now=0)
    pop(lua, now=now)
    at = float(now)
    expires = math.floor((at + 60) * 8) / 8  # (a lease ends on a 1/8 s, rounded down)
    assert r.hget("ql:j:jid", "expires") == f"{expires:.17g}"
    assert r.zscore(LOCKS, "jid") == expires
    assert r.zscore("ql:w:worker:jobs", "jid") == expires
    assert r.zscore("ql:workers", "worker") == at
    assert float(r.hget("ql:j:jid", "time")) == round(at, 3)  # (to the ms)
