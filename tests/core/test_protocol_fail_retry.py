"""Conformance of `fail` and `retry`."""

from __future__ import annotations

from typing import Any

import pytest
import redis

__all__: list[str] = []

WORK = "ql:q:queue-work"
LOCKS = "ql:q:queue-locks"
SCHED = "ql:q:queue-scheduled"


def running(lua: Any, jid: str = "jid", now: float = 0, retries: int = 5,
            queue: str = "queue") -> None:
    """Put and pop one job as `worker`."""
    lua("put", now, "worker", queue, jid, "klass", {}, 0, "retries", retries)
    assert lua.json("pop", now, queue, "worker", 1)[0]["jid"] == jid


def get(lua: Any, jid: str = "jid") -> Any:
    """Return the decoded job object."""
    return lua.json("get", 0, jid)


def fail(lua: Any, jid: str = "jid", now: float = 10, *extra: Any, worker: str = "worker",
         group: str = "grp", message: str = "msg") -> Any:
    """Fail a job."""
    return lua("fail", now, jid, worker, group, message, *extra)


# -- fail ---------------------------------------------------------------------------------------


def test_fail_returns_jid(lua: Any) -> None:
    """Reply with the jid."""
    running(lua)
    assert fail(lua) == "jid"


def test_fail_updates_job(lua: Any) -> None:
    """Mark failed, clear worker/expiry, keep the queue, record the failure."""
    running(lua)
    fail(lua, now=10.75)
    job = get(lua)
    assert job["state"] == "failed"
    assert job["worker"] == ""
    assert job["expires"] == 0
    assert job["queue"] == "queue"
    assert job["failure"] == {"group": "grp", "message": "msg", "when": 10, "worker": "worker"}


def test_fail_history(lua: Any) -> None:
    """Append `{what: failed, worker, group}`."""
    running(lua)
    fail(lua, now=10.75)
    assert get(lua)["history"][-1] == {
        "when": 10, "what": "failed", "worker": "worker", "group": "grp"}


def test_fail_indexes(lua: Any, r: redis.Redis) -> None:
    """Add the group to `ql:failures` and LPUSH the jid on `ql:f:<group>`."""
    running(lua, "a")
    running(lua, "b")
    fail(lua, "a")
    fail(lua, "b")
    assert r.smembers("ql:failures") == {"grp"}
    assert r.lrange("ql:f:grp", 0, -1) == ["b", "a"]
    assert r.type("ql:f:grp") == "list"
    assert r.type("ql:failures") == "set"


def test_fail_releases_lock(lua: Any, r: redis.Redis) -> None:
    """Remove the jid from locks and the worker's job set."""
    running(lua)
    fail(lua)
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore("ql:w:worker:jobs", "jid") is None
    assert r.zscore(WORK, "jid") is None


def test_fail_stats(lua: Any, r: redis.Redis) -> None:
    """Count `failures` and `failed` in the day bin of now."""
    running(lua, now=1700000000)
    fail(lua, now=1700000100)
    day = 1700000100 - 1700000100 % 86400
    assert r.hgetall(f"ql:s:stats:{day}:queue") == {"failures": "1", "failed": "1"}
    stats = lua.json("stats", 0, "queue", 1700000100)
    assert (stats["failures"], stats["failed"]) == (1, 1)


def test_fail_stores_data_verbatim(lua: Any, r: redis.Redis) -> None:
    """Store given data as the caller's text (docs/engine.md fix)."""
    running(lua)
    fail(lua, "jid", 10, '{"l": [], "z": 1}')
    assert r.hget("ql:j:jid", "data") == '{"l": [], "z": 1}'


def test_fail_without_data_keeps_data(lua: Any, r: redis.Redis) -> None:
    """Leave the data alone when none is given."""
    lua("put", 0, "worker", "queue", "jid", "klass", '{"k": 1}', 0)
    lua("pop", 0, "queue", "worker", 1)
    fail(lua)
    assert r.hget("ql:j:jid", "data") == '{"k": 1}'


def test_fail_with_empty_data_and_a_token_keeps_data(lua: Any, r: redis.Redis) -> None:
    """Empty data (the placeholder before an attempt token) leaves the stored data alone."""
    lua("put", 0, "worker", "queue", "jid", "klass", '{"k": 1}', 0)
    lua("pop", 0, "queue", "worker", 1)
    fail(lua, "jid", 10, "", "tok")
    assert r.hget("ql:j:jid", "data") == '{"k": 1}'
    assert get(lua)["state"] == "failed"
    assert fail(lua, "jid", 11, "", "tok") == "jid"  # the repeat is answered from the record


def test_fail_truncates_long_message(lua: Any) -> None:
    """Truncate messages above 64 KiB with a marker."""
    running(lua)
    fail(lua, message="x" * 70000)
    message = get(lua)["failure"]["message"]
    assert message.endswith(" [truncated]")
    assert len(message) <= 65536 + len(" [truncated]")
    assert message.startswith("x" * 60000)


def test_fail_missing_job(lua: Any) -> None:
    """Refuse a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Fail\(\): Job nope ?does not exist"):
        fail(lua, "nope")


def test_fail_not_running(lua: Any) -> None:
    """Refuse a waiting job, naming the state."""
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    with pytest.raises(redis.ResponseError, match=r"Fail\(\): Job jid ?not currently running: w"):
        fail(lua)


def test_fail_twice(lua: Any) -> None:
    """Refuse to fail a failed job."""
    running(lua)
    fail(lua)
    with pytest.raises(redis.ResponseError, match="not currently running: failed"):
        fail(lua)


def test_fail_other_worker(lua: Any) -> None:
    """Refuse a worker that does not own the job."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="another worker: worker"):
        fail(lua, worker="thief")


@pytest.mark.parametrize("missing", ["worker", "group", "message"])
def test_fail_missing_argument(lua: Any, missing: str) -> None:
    """Require worker, group and message."""
    running(lua)
    args = {"worker": "worker", "group": "grp", "message": "msg"}
    args[missing] = ""
    with pytest.raises(redis.ResponseError, match=rf'Arg "{missing}"'):
        lua("fail", 1, "jid", args["worker"], args["group"], args["message"])
    assert get(lua)["state"] == "running"


# -- retry --------------------------------------------------------------------------------------


def test_retry_returns_remaining(lua: Any) -> None:
    """Reply with the decremented retry budget as an integer."""
    running(lua, retries=3)
    assert lua("retry", 5, "jid", "queue", "worker") == 2


def test_retry_requeues_waiting(lua: Any, r: redis.Redis) -> None:
    """Put the job back into work, state waiting, lock released."""
    running(lua)
    lua("retry", 5, "jid", "queue", "worker")
    job = get(lua)
    assert (job["state"], job["remaining"]) == ("waiting", 4)
    assert r.zscore(WORK, "jid") == pytest.approx(-5 / 1e10)
    assert r.zscore(LOCKS, "jid") is None
    assert r.zscore("ql:w:worker:jobs", "jid") is None


def test_retry_writes_a_history_entry_with_its_reason(lua: Any) -> None:
    """A retry that does not exhaust says so in the history, with its group and message."""
    running(lua)
    lua("retry", 5, "jid", "queue", "worker", 0, "app.Flaky", "timed out talking to the API")
    assert get(lua)["history"][-1] == {
        "when": 5, "what": "retry", "worker": "worker", "remaining": 4, "group": "app.Flaky",
        "message": "timed out talking to the API"}
    lua.json("pop", 6, "queue", "worker", 1)
    lua("retry", 7, "jid", "queue", "worker", 30)
    assert get(lua)["history"][-1] == {
        "when": 7, "what": "retry", "worker": "worker", "remaining": 3, "delay": 30}
    whats = [entry["what"] for entry in get(lua)["history"]]
    assert whats == ["put", "popped", "retry", "popped", "retry"]


def test_retry_reason_is_cut_at_a_character_boundary(lua: Any) -> None:
    """A long reason is cut to 300 bytes in the history, never inside a UTF-8 character."""
    running(lua)
    lua("retry", 5, "jid", "queue", "worker", 0, "g", "é" * 400)
    message = get(lua)["history"][-1]["message"]
    assert message == "é" * 150 + "..."


def test_retry_with_delay(lua: Any, r: redis.Redis) -> None:
    """Schedule the job at now + delay."""
    running(lua)
    lua("retry", 5, "jid", "queue", "worker", 20)
    assert r.zscore(SCHED, "jid") == 25
    assert get(lua)["state"] == "scheduled"
    assert lua("pop", 24, "queue", "worker", 1) == "{}"
    assert lua.json("pop", 25, "queue", "worker", 1)[0]["jid"] == "jid"


def test_retry_with_group_and_message_records_failure(lua: Any) -> None:
    """Record a failure (floored time) even though the job is retried."""
    running(lua)
    lua("retry", 5.5, "jid", "queue", "worker", 0, "grp", "why")
    job = get(lua)
    assert job["state"] == "waiting"
    assert job["failure"] == {"group": "grp", "message": "why", "when": 5, "worker": "worker"}


def test_retry_exhausted(lua: Any, r: redis.Redis) -> None:
    """Fail into `failed-retries-<queue>` once the budget is spent."""
    running(lua, retries=0)
    assert lua("retry", 5.5, "jid", "queue", "worker") == -1
    job = get(lua)
    assert job["state"] == "failed"
    assert job["worker"] == ""
    assert job["failure"] == {
        "group": "failed-retries-queue",
        "message": 'Job exhausted retries in queue "queue"',
        "when": 5.5,
        "worker": "",
    }
    assert job["history"][-1] == {"when": 5, "what": "failed", "group": "failed-retries-queue"}
    assert r.lrange("ql:f:failed-retries-queue", 0, -1) == ["jid"]
    assert r.sismember("ql:failures", "failed-retries-queue")
    assert r.zscore(WORK, "jid") is None
    assert r.hgetall("ql:s:stats:0:queue") == {"failures": "1", "failed": "1"}


def test_retry_exhausted_with_group_and_message(lua: Any, r: redis.Redis) -> None:
    """Use the given group and message (floored time, worker kept)."""
    running(lua, retries=0)
    assert lua("retry", 5.5, "jid", "queue", "worker", 0, "mine", "broke") == -1
    assert get(lua)["failure"] == {
        "group": "mine", "message": "broke", "when": 5, "worker": "worker"}
    assert r.lrange("ql:f:mine", 0, -1) == ["jid"]


def test_retry_counts_down(lua: Any) -> None:
    """Each retry costs one; the R+1-th call fails the job."""
    running(lua, retries=2)
    replies = []
    for n in range(3):
        replies.append(lua("retry", n + 1, "jid", "queue", "worker"))
        if n < 2:
            lua("pop", n + 1, "queue", "worker", 1)
    assert replies == [1, 0, -1]
    assert get(lua)["state"] == "failed"


def test_retry_clears_grace(lua: Any, r: redis.Redis) -> None:
    """Delete the grace flag set by a courtesy notice."""
    running(lua)
    lua("pop", 61, "queue", "w2", 1)
    assert r.hget("ql:j:jid", "grace") == "1"
    lua("retry", 62, "jid", "queue", "worker")
    assert r.hget("ql:j:jid", "grace") is None


def test_retry_missing_job(lua: Any) -> None:
    """Refuse a job that does not exist."""
    with pytest.raises(redis.ResponseError, match=r"Retry\(\): Job nope does not exist"):
        lua("retry", 0, "nope", "queue", "worker")


def test_retry_not_running(lua: Any) -> None:
    """Refuse a job that is not running."""
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    with pytest.raises(redis.ResponseError, match="is not currently running: waiting"):
        lua("retry", 0, "jid", "queue", "worker")


def test_retry_other_worker(lua: Any) -> None:
    """Refuse a worker that does not own the job."""
    running(lua)
    with pytest.raises(redis.ResponseError, match="given to another worker: worker"):
        lua("retry", 0, "jid", "queue", "thief")


def test_fix_retry_refuses_other_queue(lua: Any, r: redis.Redis) -> None:
    """Refuse a queue argument that is not the job's queue (docs/engine.md fix)."""
    running(lua)
    before = r.hgetall("ql:j:jid")
    with pytest.raises(redis.ResponseError, match=r"Retry\(\)"):
        lua("retry", 1, "jid", "other", "worker")
    assert r.hgetall("ql:j:jid") == before
    assert not r.exists("ql:q:other-work")


def test_failed_job_keeps_failure_record_across_put(lua: Any) -> None:
    """`put` does not clear the failure record."""
    running(lua)
    fail(lua)
    lua("put", 20, "worker", "queue", "jid", "klass", {}, 0)
    assert get(lua)["failure"]["group"] == "grp"
