"""The worker's hot path (`complete.reserve`) skips bookkeeping writes it can prove redundant.

Replies are unaffected; these tests pin which commands a steady-state job runs
(docs/engine.md, "Internal bookkeeping").
"""

from __future__ import annotations

from typing import Any

import redis

__all__: list[str] = []

Q = "q"
W = "w"


def fill(lua: Any, n: int, now: float = 0) -> None:
    for i in range(n):
        lua("put", now, "x", Q, f"j{i}", "klass", "{}", 0)


def first(lua: Any, now: float) -> str:
    return str(lua.json("reserve", now, W, 1, Q)["jobs"][0]["jid"])


def next_job(lua: Any, jid: str, now: float) -> str:
    reply = lua.json("complete.reserve", now, jid, W, Q, "{}", "", 1, Q)
    assert reply["state"] == "complete"
    return str(reply["jobs"][0]["jid"])


def calls(r: redis.Redis, command: str) -> int:
    return int(r.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def test_registry_rescored_once_a_second(lua: Any, r: redis.Redis) -> None:
    """complete.reserve re-scores ql:workers on the first job of each second, not every job
    (as a Redis 7 function; EVALSHA keeps no state between calls and writes it every time)."""
    fill(lua, 6)
    jid = first(lua, 10.0)
    jid = next_job(lua, jid, 10.2)  # nothing known yet: written
    assert r.zscore("ql:workers", W) == 10.2
    r.config_resetstat()
    jid = next_job(lua, jid, 10.5)
    jid = next_job(lua, jid, 10.9)
    if lua.function is not None:
        assert calls(r, "zadd") == 6  # completed, worker's jobs, locks; no registry
        assert r.zscore("ql:workers", W) == 10.2
    else:
        assert calls(r, "zadd") == 8 and r.zscore("ql:workers", W) == 10.9
    jid = next_job(lua, jid, 11.1)  # a new second: written again
    assert r.zscore("ql:workers", W) == 11.1
    assert lua.json("worker.info", 11.2, W)[0]["done"] == "4"


def test_deleted_registry_entry_written_again_in_the_same_second(
        lua: Any, r: redis.Redis) -> None:
    """A worker deregistered (or its info hash deleted, as FLUSHDB does) is registered again
    by its next job, even within the second its entry was last written."""
    fill(lua, 6)
    jid = first(lua, 20.0)
    jid = next_job(lua, jid, 20.1)
    jid = next_job(lua, jid, 20.2)
    lua("worker.deregister", 20.3, W)
    assert r.zscore("ql:workers", W) is None
    jid = next_job(lua, jid, 20.4)
    assert r.zscore("ql:workers", W) == 20.4
    r.zrem("ql:workers", W)
    r.delete("ql:w:w:info")
    jid = next_job(lua, jid, 20.5)
    assert r.zscore("ql:workers", W) == 20.5
    assert lua.json("worker.info", 20.6, W)[0]["done"] == "1"


def test_registry_state_does_not_leak_across_databases(lua: Any, r: redis.Redis) -> None:
    """A flushed database (the same worker name, the same second) gets its registry entry:
    the remembered `done` count no longer follows."""
    fill(lua, 3)
    jid = first(lua, 30.0)
    jid = next_job(lua, jid, 30.1)
    jid = next_job(lua, jid, 30.2)
    r.flushdb()
    fill(lua, 3, 30.3)
    jid = first(lua, 30.3)
    r.zrem("ql:workers", W)  # as if only complete.reserve could write it
    next_job(lua, jid, 30.4)
    assert r.zscore("ql:workers", W) == 30.4


def test_completed_count_not_asked_while_far_under_the_cap(lua: Any, r: redis.Redis) -> None:
    """Retention asks ZCARD ql:completed only when the last scan's count is within
    Q.COMPLETED_MARGIN (20,000) of jobs-history-count; the scan itself runs once a second."""
    fill(lua, 8)
    jid = first(lua, 40.0)
    jid = next_job(lua, jid, 40.1)  # first completion: the scan runs (ZCARD once)
    assert r.hget("ql:config", "#completed-count") == "1"
    r.config_resetstat()
    jid = next_job(lua, jid, 40.2)
    jid = next_job(lua, jid, 40.3)
    assert calls(r, "zcard") == 0
    jid = next_job(lua, jid, 41.2)  # the bound passed: scanned and counted again
    assert calls(r, "zcard") == 1 and r.hget("ql:config", "#completed-count") == "4"
    lua("config.set", 41.3, "jobs-history-count", 20003)  # within the margin: counted per job
    r.config_resetstat()
    jid = next_job(lua, jid, 41.4)
    assert calls(r, "zcard") == 1
    lua("config.set", 41.5, "jobs-history-count", 2)
    next_job(lua, jid, 41.6)
    assert r.zcard("ql:completed") == 2


def test_data_sent_back_unchanged_is_not_checked_again(lua: Any, r: redis.Redis) -> None:
    """complete.reserve and complete take the data the job already stores as is (it was
    checked when written); any other data is still checked."""
    fill(lua, 3)
    jid = first(lua, 50.0)
    r.hset(f"ql:j:{jid}", "data", "[1]")  # as another writer might have left it
    reply = lua.json("complete.reserve", 50.1, jid, W, Q, "[1]", "", 1, Q)
    assert reply["state"] == "complete" and r.hget(f"ql:j:{jid}", "data") == "[1]"
    jid = str(reply["jobs"][0]["jid"])
    r.hset(f"ql:j:{jid}", "data", "[2]")
    try:
        lua("complete.reserve", 50.2, jid, W, Q, "[3]", "", 1, Q)
    except redis.ResponseError as exc:
        assert "must be a JSON object" in str(exc)
    else:
        raise AssertionError("changed non-object data was accepted")
    assert lua("complete", 50.3, jid, W, Q, "[2]") == "complete"


def test_lock_checks_idle_workers_only_when_a_registration_may_outlast_it(
        lua: Any, r: redis.Redis) -> None:
    """A pop asks ql:idle:<queue> about its new lock only when some reserve.wait registered a
    ttl longer than the lock plus its grace period (heartbeat 60 + grace 10 here; the lock
    ends on a 1/8 s, rounded down)."""
    fill(lua, 6)
    jid = next_job(lua, first(lua, 60.0), 60.05)  # (the completed set's once-a-second scan)
    r.config_resetstat()
    jid = next_job(lua, jid, 60.1)
    assert calls(r, "zrangebyscore") == 0  # no registration ever
    lua("reserve.wait", 60.2, "idle", 69, 1, "other")  # ttl 69: ends before lock + grace
    r.config_resetstat()
    jid = next_job(lua, jid, 60.3)
    assert calls(r, "zrangebyscore") == 0
    assert r.hget("ql:config", "#idle-ttl") == "69"
    lua("reserve.wait", 60.4, "idle", 3600, 1, "other")
    r.config_resetstat()
    next_job(lua, jid, 60.5)
    assert calls(r, "zrangebyscore") == 1  # the idle workers of q: might be news
    assert r.hget("ql:config", "#idle-ttl") == "3600"
