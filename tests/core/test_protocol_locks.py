"""Conformance of heartbeat, lock expiry, grace, retries exhaustion and timeout."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

__all__: list[str] = []

WORK = "ql:q:queue-work"
LOCKS = "ql:q:queue-locks"


def running(lua: Any, jid: str = "jid", now: float = 0, retries: int = 5, priority: int = 0,
            worker: str = "worker") -> None:
    """Put and pop one job."""
    lua("put", now, "worker", "queue", jid, "klass", {}, 0, "retries", retries,
        "priority", priority)
    assert lua.json("pop", now, "queue", worker, 1)[0]["jid"] == jid


def get(lua: Any, jid: str = "jid") -> Any:
    """Return the decoded job object."""
    return lua.json("get", 0, jid)


def pop(lua: Any, now: float, worker: str = "w2", count: int = 1) -> Any:
    """Pop and decode."""
    return lua.json("pop", now, "queue", worker, count)


# -- heartbeat ----------------------------------------------------------------------------------


def test_heartbeat_returns_truncated_expiry(lua: Any) -> None:
    """Reply with now + heartbeat as an integer (fraction truncated)."""
    running(lua)
    assert lua("heartbeat", 10.75, "jid", "worker") == 70


def test_heartbeat_renews_all_three_locks(lua: Any, r: redis.Redis) -> None:
    """Update the hash expiry, the queue's locks and the worker's jobs."""
    running(lua)
    lua("heartbeat", 30, "jid", "worker")
    assert float(str(r.hget("ql:j:jid", "expires"))) == 90
    assert r.zscore(LOCKS, "jid") == 90
    assert r.zscore("ql:w:worker:jobs", "jid") == 90
    assert get(lua)["expires"] == 90


@pytest.mark.parametrize("step", ["pop", "heartbeat"])
def test_a_lease_ends_on_an_eighth_of_a_second(lua: Any, r: redis.Redis, step: str) -> None:
    """A pop's or a heartbeat's lock expiry is now + heartbeat rounded down to 1/8 s, so the
    score Redis keeps as text in a small lock set prints in at most 13 digits (parsed again
    on every insertion into the set: 17 digits cost several times more)."""
    now = 1700000000.123456
    running(lua, now=0)
    if step == "pop":
        lua("put", now, "worker", "queue", "jid2", "klass", {}, 0)
        lua.json("pop", now, "queue", "worker", 1)
        jid = "jid2"
    else:
        lua("heartbeat", now, "jid", "worker")
        jid = "jid"
    expires = 1700000060.0  # (60.123456 s on, rounded down to 1/8 s)
    assert float(str(r.hget(f"ql:j:{jid}", "expires"))) == expires
    assert r.zscore(LOCKS, jid) == expires
    assert r.zscore("ql:w:worker:jobs", jid) == expires
    later = 1700000000.9
    lua("heartbeat", later, jid, "worker")
    text = str(r.hget(f"ql:j:{jid}", "expires"))
    assert text == "1700000060.875" and float(text) <= later + 60 < float(text) + 0.125
    for score in r.zrange(LOCKS, 0, -1, withscores=True):
        digits = f"{score[1]:.17g}".replace(".", "")
        assert len(digits) <= 13, score


def test_heartbeat_refreshes_worker(lua: Any, r: redis.Redis) -> None:
    """Refresh the worker's last-seen time."""
    running(lua)
    lua("heartbeat", 1700000000.5, "jid", "worker")
    assert r.zscore("ql:workers", "worker") == 1700000000.5


def test_heartbeat_uses_queue_heartbeat(lua: Any) -> None:
    """Use `<queue>-heartbeat`, then `heartbeat`."""
    running(lua)
    lua("config.set", 0, "heartbeat", 20)
    assert lua("heartbeat", 1, "jid", "worker") == 21
    lua("config.set", 0, "queue-heartbeat", 5)
    assert lua("heartbeat", 2, "jid", "worker") == 7


def test_heartbeat_stores_data_verbatim(lua: Any, r: redis.Redis) -> None:
    """Store given data as the caller's text (docs/engine.md fix)."""
    running(lua)
    lua("heartbeat", 1, "jid", "worker", '{"progress": [], "n": 1}')
    assert r.hget("ql:j:jid", "data") == '{"progress": [], "n": 1}'


def test_heartbeat_missing_job(lua: Any) -> None:
    """Refuse a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Heartbeat\(\): Job nope does not exist"):
        lua("heartbeat", 0, "nope", "worker")


def test_heartbeat_after_cancel(lua: Any) -> None:
    """A canceled job reads as missing."""
    running(lua)
    lua("cancel", 1, "jid")
    with pytest.raises(redis.ResponseError, match="Job jid does not exist"):
        lua("heartbeat", 2, "jid", "worker")


def test_heartbeat_not_running(lua: Any) -> None:
    """Refuse a job that is not running, naming the state."""
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    with pytest.raises(redis.ResponseError, match="not currently running: waiting"):
        lua("heartbeat", 0, "jid", "worker")


def test_heartbeat_other_worker(lua: Any) -> None:
    """Refuse a worker that does not own the job."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="given out to another worker: worker"):
        lua("heartbeat", 1, "jid", "thief")


def test_heartbeat_missing_worker(lua: Any) -> None:
    """Require a worker."""
    running(lua)
    with pytest.raises(redis.ResponseError, match='Arg "worker"'):
        lua("heartbeat", 1, "jid")


def test_heartbeat_after_expiry_without_repop(lua: Any) -> None:
    """A late heartbeat succeeds while nobody re-popped the job."""
    running(lua)
    assert lua("heartbeat", 100, "jid", "worker") == 160


# -- lock expiry and grace ----------------------------------------------------------------------


def test_expired_lock_courtesy_notice(lua: Any, r: redis.Redis) -> None:
    """The first pop after expiry sends a notice and does not hand the job out."""
    running(lua)
    assert lua("pop", 60, "queue", "w2", 1) == "{}"
    job = get(lua)
    assert (job["state"], job["worker"], job["remaining"]) == ("running", "worker", 5)
    assert job["history"][-1] == {"when": 60, "what": "timed-out"}
    assert r.hget("ql:j:jid", "grace") == "1"
    assert r.zscore(LOCKS, "jid") == 70
    assert r.zscore("ql:w:worker:jobs", "jid") is None
    assert lua.json("stats", 0, "queue", 0)["retries"] == 1


def test_courtesy_notice_does_not_block_other_jobs(lua: Any) -> None:
    """The popper still gets a waiting job in the same call."""
    running(lua)
    lua("put", 1, "worker", "queue", "other", "klass", {}, 0)
    assert [j["jid"] for j in pop(lua, 60)] == ["other"]


def test_grace_period_then_redispatch(lua: Any, r: redis.Redis) -> None:
    """After the grace period the job goes to the next popper, costing one retry."""
    running(lua)
    pop(lua, 60)
    assert pop(lua, 69) == {}
    jobs = pop(lua, 70)
    assert [j["jid"] for j in jobs] == ["jid"]
    job = jobs[0]
    assert (job["worker"], job["state"], job["remaining"], job["expires"]) == (
        "w2", "running", 4, 130)
    assert job["history"][-1] == {"when": 70, "what": "popped", "worker": "w2"}
    assert r.hget("ql:j:jid", "grace") is None
    assert r.zscore("ql:w:w2:jobs", "jid") == 130
    assert r.zscore(LOCKS, "jid") == 130


def test_old_owner_loses_after_redispatch(lua: Any) -> None:
    """The previous owner can no longer heartbeat or complete."""
    running(lua)
    pop(lua, 60)
    pop(lua, 70)
    with pytest.raises(redis.ResponseError, match="another worker: w2"):
        lua("heartbeat", 71, "jid", "worker")
    with pytest.raises(redis.ResponseError, match="another worker: w2"):
        lua("complete", 71, "jid", "worker", "queue", {})


def test_owner_may_heartbeat_during_grace(lua: Any, r: redis.Redis) -> None:
    """The owner keeps the job by heartbeating during the grace period."""
    running(lua)
    pop(lua, 60)
    assert lua("heartbeat", 65, "jid", "worker") == 125
    assert r.zscore("ql:w:worker:jobs", "jid") == 125
    assert pop(lua, 70) == {}
    assert get(lua)["worker"] == "worker"


def test_fix_heartbeat_clears_grace(lua: Any, r: redis.Redis) -> None:
    """A heartbeat cancels the pending invalidation (docs/engine.md fix)."""
    running(lua)
    pop(lua, 60)
    lua("heartbeat", 65, "jid", "worker")
    assert r.hget("ql:j:jid", "grace") is None
    # The next expiry gets a fresh courtesy notice instead of immediate invalidation.
    assert pop(lua, 125) == {}
    assert get(lua)["worker"] == "worker"
    assert r.hget("ql:j:jid", "grace") == "1"


def test_custom_grace_period(lua: Any, r: redis.Redis) -> None:
    """Re-lock for `grace-period` seconds."""
    lua("config.set", 0, "grace-period", 25)
    running(lua)
    pop(lua, 61)
    assert r.zscore(LOCKS, "jid") == 86
    assert pop(lua, 85) == {}
    assert [j["jid"] for j in pop(lua, 86)] == ["jid"]


def test_grace_zero_redispatches_at_once(lua: Any) -> None:
    """With grace 0, notice and invalidation happen in the same pop."""
    lua("config.set", 0, "grace-period", 0)
    running(lua)
    jobs = pop(lua, 61)
    assert [j["jid"] for j in jobs] == ["jid"]
    assert jobs[0]["remaining"] == 4
    whats = [h["what"] for h in jobs[0]["history"]]
    assert whats == ["put", "popped", "timed-out", "popped"]


def test_retries_exhausted_by_lock_loss(lua: Any, r: redis.Redis) -> None:
    """Fail a job into `failed-retries-<queue>` once its retries are spent."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, retries=0)
    assert lua("pop", 61.5, "queue", "w2", 1) == "{}"
    job = get(lua)
    assert job["state"] == "failed"
    assert job["worker"] == ""
    assert job["failure"] == {
        "group": "failed-retries-queue",
        "message": 'Job exhausted retries in queue "queue"',
        "when": 61.5,
        "worker": "",
    }
    assert job["history"][-1] == {"when": 61, "what": "failed", "group": "failed-retries-queue"}
    assert r.lrange("ql:f:failed-retries-queue", 0, -1) == ["jid"]
    assert r.sismember("ql:failures", "failed-retries-queue")
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore(WORK, "jid") is None
    stats = lua.json("stats", 0, "queue", 0)
    assert (stats["failures"], stats["failed"], stats["retries"]) == (1, 1, 1)


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_dispatched_retries_plus_one_times(lua: Any, retries: int) -> None:
    """A job with R retries is dispatched R+1 times before it fails."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, retries=retries)
    dispatches = 1
    for n in range(1, retries + 3):
        if pop(lua, n * 100) != {}:
            dispatches += 1
    assert dispatches == retries + 1
    assert get(lua)["state"] == "failed"


def test_expired_locks_handled_in_expiry_order(lua: Any) -> None:
    """Examine expired locks in ascending expiry, at most `count`."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, "a", now=0)
    running(lua, "b", now=5)
    running(lua, "c", now=3)
    assert [j["jid"] for j in pop(lua, 100, count=2)] == ["a", "c"]
    assert get(lua, "b")["worker"] == "worker"


def test_peek_does_not_invalidate(lua: Any, r: redis.Redis) -> None:
    """Lock expiry handling runs on pop, not on peek."""
    running(lua)
    lua("peek", 100, "queue", 5)
    assert r.hget("ql:j:jid", "grace") is None
    assert r.zscore(LOCKS, "jid") == 60


# -- timeout ------------------------------------------------------------------------------------


def test_timeout_returns_nil(lua: Any) -> None:
    """Reply nil."""
    running(lua)
    assert lua("timeout", 5, "jid") is None


def test_timeout_stalls_the_job(lua: Any, r: redis.Redis) -> None:
    """Put the job at the front of work in state stalled without costing a retry."""
    running(lua)
    lua("timeout", 5.5, "jid")
    job = get(lua)
    assert (job["state"], job["expires"], job["remaining"]) == ("stalled", 0, 5)
    assert job["history"][-1] == {"when": 5, "what": "timed-out"}
    assert r.zscore(WORK, "jid") == math.inf
    assert r.zscore(LOCKS, "jid") is None


def test_fix_timeout_clears_worker(lua: Any, r: redis.Redis) -> None:
    """Clear the worker field and the worker's job entry (docs/engine.md fix)."""
    running(lua)
    lua("timeout", 5, "jid")
    assert get(lua)["worker"] == ""
    assert r.zscore("ql:w:worker:jobs", "jid") is None


def test_timed_out_job_pops_first(lua: Any) -> None:
    """A stalled job is popped before higher priorities."""
    running(lua)
    lua("put", 1, "worker", "queue", "urgent", "klass", {}, 0, "priority", 100)
    lua("timeout", 2, "jid")
    jobs = pop(lua, 3)
    assert [j["jid"] for j in jobs] == ["jid"]
    assert (jobs[0]["state"], jobs[0]["worker"]) == ("running", "w2")


def test_timeout_several(lua: Any) -> None:
    """Time out every jid given."""
    running(lua, "a")
    running(lua, "b")
    lua("timeout", 5, "a", "b")
    assert get(lua, "a")["state"] == "stalled"
    assert get(lua, "b")["state"] == "stalled"


def test_timeout_missing_job(lua: Any) -> None:
    """Refuse a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Timeout\(\): Job nope does not exist"):
        lua("timeout", 0, "nope")


def test_timeout_not_running(lua: Any) -> None:
    """Refuse a job that is not running."""
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    with pytest.raises(redis.ResponseError, match=r"Timeout\(\): Job jid not running"):
        lua("timeout", 0, "jid")


def test_fix_timeout_validates_all_before_writing(lua: Any) -> None:
    """A bad jid anywhere in the list leaves the good ones untouched (docs/engine.md)."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="does not exist"):
        lua("timeout", 5, "jid", "nope")
    assert get(lua)["state"] == "running"


def test_shorter_queue_heartbeat_expires_on_time(lua: Any) -> None:
    """A lock renewed with a shorter heartbeat expires at its new time."""
    running(lua, "a", now=0)
    lua("config.set", 0, "queue-heartbeat", 5)
    assert lua("heartbeat", 1, "a", "worker") == 6
    assert lua("pop", 6, "queue", "w2", 1) == "{}"
    assert get(lua, "a")["history"][-1]["what"] == "timed-out"


def test_second_pop_with_shorter_heartbeat(lua: Any) -> None:
    """Locks taken later with a shorter heartbeat are noticed when they expire."""
    running(lua, "a", now=0)
    lua("config.set", 0, "queue-heartbeat", 5)
    running(lua, "b", now=1)
    assert lua("pop", 6, "queue", "w2", 1) == "{}"
    assert get(lua, "b")["history"][-1]["what"] == "timed-out"
    assert get(lua, "a")["history"][-1]["what"] == "popped"


def test_retry_delay_pops_at_its_time_after_idle_pop(lua: Any) -> None:
    """A retried-with-delay job pops at its time even after idle pops."""
    running(lua)
    lua("heartbeat", 1, "jid", "worker")
    lua("retry", 2, "jid", "queue", "worker", 30)
    assert lua("pop", 3, "queue", "w2", 1) == "{}"
    assert lua.json("pop", 32, "queue", "w2", 1)[0]["jid"] == "jid"


def test_skewed_clock_put_after_later_pop(lua: Any) -> None:
    """A client with an earlier clock still gets its delayed job at the right time."""
    assert lua("pop", 1000, "queue", "w2", 1) == "{}"
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 5)
    assert lua.json("pop", 5, "queue", "w2", 1)[0]["jid"] == "jid"


def test_grace_zero_after_earlier_notice(lua: Any) -> None:
    """With grace 0 a second notice is still sent before invalidation (grace <= 0)."""
    running(lua)
    pop(lua, 60)
    lua("config.set", 0, "grace-period", 0)
    jobs = pop(lua, 70)
    assert [j["jid"] for j in jobs] == ["jid"]
    whats = [h["what"] for h in jobs[0]["history"]]
    assert whats == ["put", "popped", "timed-out", "timed-out", "popped"]
    assert lua.json("stats", 0, "queue", 0)["retries"] == 2


def test_redispatched_jobs_come_first(lua: Any) -> None:
    """Re-dispatched jobs lead the reply, ahead of higher-priority waiting jobs."""
    lua("config.set", 0, "grace-period", 0)
    running(lua, "stale")
    lua("put", 1, "worker", "queue", "urgent", "klass", {}, 0, "priority", 50)
    assert [j["jid"] for j in pop(lua, 100, count=2)] == ["stale", "urgent"]


def test_two_notices_in_one_pop_count_two_retries(lua: Any) -> None:
    """Each courtesy notice counts one `retries` in the day's stats."""
    running(lua, "a", now=0)
    running(lua, "b", now=1)
    assert pop(lua, 100, count=2) == {}
    assert lua.json("stats", 0, "queue", 0)["retries"] == 2
