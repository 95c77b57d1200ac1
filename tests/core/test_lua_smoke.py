"""Smoke tests of the engine's extensions and fixes (docs/engine.md), against real Redis."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
import redis

from tests.core.conftest import snapshot

__all__: list[str] = []

Q = "q"


def put(lua: Any, jid: str, queue: str = Q, *, now: float = 0, delay: float = 0,
        data: str = "{}", worker: str = "w", **opts: Any) -> Any:
    """Put a job; keyword options become name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, worker, queue, jid, "K", data, delay, *pairs)


def pop(lua: Any, queue: str = Q, worker: str = "w", count: int = 1, now: float = 1) -> Any:
    """Pop and decode."""
    return lua.json("pop", now, queue, worker, count)


def wakes(got: list[tuple[str, str]]) -> list[str]:
    """The wake-up channels among collected events."""
    return [ch for ch, _ in got if ch.startswith("ql:wake:")]


def no_wakes(got: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Collected events without the wake-up channel."""
    return [(ch, p) for ch, p in got if not ch.startswith("ql:wake:")]


# -- data fidelity and the basic cycle ---------------------------------------------------------


def test_data_verbatim_through_every_path(lua: Any) -> None:
    """Keep the caller's JSON text byte-for-byte through put/heartbeat/fail/complete/advance."""
    text = ('{"a": [], "b": {}, "n": 12345678901234567890, "f": 1e-300,'
            ' "u": "\u00e9\U0001f600\\u0000"}')
    put(lua, "j", data=text)
    assert pop(lua)[0]["data"] == text
    lua("heartbeat", 2, "j", "w", text.replace("[]", "[[]]"))
    assert lua.json("get", 2, "j")["data"] == text.replace("[]", "[[]]")
    assert lua("complete", 3, "j", "w", Q, text, "next", "q2") == "waiting"
    assert lua.json("get", 3, "j")["data"] == text
    [job] = pop(lua, "q2", now=4)
    lua("fail", 5, "j", "w", "g", "boom", text)
    assert lua.json("get", 5, "j")["data"] == text == job["data"]


def test_history_capped_keeps_first_and_latest(lua: Any) -> None:
    """With max-job-history 5, 100 puts keep put@0 and the last four."""
    lua("config.set", 0, "max-job-history", 5)
    for n in range(100):
        put(lua, "j", now=n)
    whens = [h["when"] for h in lua.json("get", 100, "j")["history"]]
    assert whens == [0, 96, 97, 98, 99]
    lua("config.set", 0, "max-job-history", 3)
    put(lua, "j", now=200)
    assert [h["when"] for h in lua.json("get", 200, "j")["history"]] == [0, 99, 200]


def test_stats_batched_per_call(lua: Any) -> None:
    """Record one wait sample per popped job, with the histogram, in one call."""
    for n in range(3):
        put(lua, f"j{n}", now=0)
    pop(lua, count=3, now=5)
    stats = lua.json("stats", 5, Q, 5)
    assert stats["wait"]["count"] == 3
    assert stats["wait"]["mean"] == 5
    assert stats["wait"]["histogram"][5] == 3


# -- validation happens before any write -------------------------------------------------------


BAD_CALLS: list[tuple[Any, ...]] = [
    ("put", 1, "w", Q, "n1", "K", "{}", "inf"),
    ("put", 1, "w", Q, "n1", "K", "{}", "nan"),
    ("put", 1, "w", Q, "n1", "K", "{}", "0x10"),
    ("put", 1, "w", Q, "n1", "K", "{}", " 5"),
    ("put", 1, "w", Q, "n1", "K", "{}", "-1"),
    ("put", 1, "w", Q, "n1", "K", "{}", "0", "priority", "1.5"),
    ("put", 1, "w", Q, "n1", "K", "{}", "0", "retries", "1001"),
    ("put", 1, "w", Q, "n1", "K", "{}", "0", "tags", '{"a": 1}'),
    ("put", 1, "w", Q, "n1", "K", "{}", "0", "tags", json.dumps([f"t{i}" for i in range(51)])),
    ("put", 1, "w", Q, "n1", "K", "[]", "0"),
    ("put", 1, "w", Q, "n1", "K", "{bad", "0"),
    ("put", 1, "w", Q, "bad jid", "K", "{}", "0"),
    ("put", 1, "w", Q, "x-history", "K", "{}", "0"),
    ("put", 1, "w", Q, "n1", "K", "{}", "0", "depends", '["n1"]'),
    ("put", 1, "w:1", Q, "n1", "K", "{}", "0"),
    ("put", 1, "w", "bad/queue", "n1", "K", "{}", "0"),
    ("put", 1, "w", Q, "old", "K", "{}", "0", "tags", "[1]"),
    ("put", 1, "w", Q, "old", "K", "{}", "0", "priority"),
    ("pop", 1, Q, "w", "0"),
    ("pop", 1, Q, "w", "1001"),
    ("peek", 1, Q, "501"),
    ("cancel", 1, *[f"j{i}" for i in range(1001)]),
    ("config.set", 1, "heartbeat", "0"),
    ("config.set", 1, "max-job-history", "2"),
    ("recur", 1, Q, "r", "K", "{}", "interval", "0", "0"),
    ("retry", 1, "old", "other", "w"),
    ("put", "inf", "w", Q, "n1", "K", "{}", "0"),
]


@pytest.mark.parametrize("call", BAD_CALLS, ids=lambda c: " ".join(map(str, c))[:60])
def test_refused_calls_change_nothing(lua: Any, r: redis.Redis, call: tuple[Any, ...]) -> None:
    """Raise and leave every key untouched."""
    put(lua, "old", tags='["t1"]')
    pop(lua)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"user_(script|function):\d+: "):
        lua(*call)
    assert snapshot(r) == before


def test_keys_other_than_a_keyspace_are_refused(lua: Any, r: redis.Redis) -> None:
    """Reject a key that is not a shard prefix, and more than one key."""
    with pytest.raises(redis.ResponseError, match=r'Keyspace "k" must look like ql:\{<tag>\}:'):
        lua.script(keys=["k"], args=["put", 0])
    with pytest.raises(redis.ResponseError, match="Only one key"):
        lua.script(keys=["ql:{a}:", "k"], args=["put", 0])


# -- events ------------------------------------------------------------------------------------


def test_event_payloads_escape_like_cjson(lua: Any, events: Any) -> None:
    """Escape `/` and `"` exactly as cjson does, in the documented key order."""
    put(lua, "j", worker="a/b")
    pop(lua, worker="a/b")
    put(lua, "j", worker="other")
    lua("config.set", 2, "x/y", 'say "hi"')
    got = no_wakes(events())
    assert ("ql:w:a/b", '{"jid":"j","event":"lock_lost","worker":"a\\/b"}') in got
    assert ("ql:log", '{"option":"x\\/y","event":"config_set","value":"say \\"hi\\""}') in got
    pop(lua, worker="w2")
    lua("fail", 3, "j", "w2", "g/1", 'm "1"')
    expected = '{"message":"m \\"1\\"","jid":"j","group":"g\\/1","event":"failed","worker":"w2"}'
    assert no_wakes(events())[-1] == ("ql:log", expected)


def test_wake_published_once_per_call_per_queue(lua: Any, events: Any) -> None:
    """Publish the queue name on ql:wake:<queue> once per call when jobs become ready."""
    events()
    put(lua, "a")
    assert [e for e in events() if e[0].startswith("ql:wake:")] == [("ql:wake:q", "q")]
    put(lua, "b", delay=10)
    assert wakes(events()) == []
    for jid in ("c", "d", "e"):
        put(lua, jid, "q2")
        pop(lua, "q2", now=1)
        lua("fail", 1, jid, "w", "g", "m")
    events()
    assert lua("unfail", 2, "q3", "g", 10) == 3
    assert wakes(events()) == ["ql:wake:q3"]
    lua("peek", 20, Q, 10)
    assert wakes(events()) == ["ql:wake:q"]


# -- fixes -------------------------------------------------------------------------------------


def test_timeout_clears_worker(lua: Any, r: redis.Redis) -> None:
    """Remove the jid from the worker's set and clear the worker field."""
    put(lua, "j")
    pop(lua)
    lua("timeout", 2, "j")
    assert r.hget("ql:j:j", "worker") == ""
    assert r.zcard("ql:w:w:jobs") == 0
    assert r.zscore("ql:q:q-work", "j") == float("inf")


def test_heartbeat_clears_grace(lua: Any, r: redis.Redis) -> None:
    """A heartbeat during the grace period cancels the pending invalidation."""
    put(lua, "j")
    pop(lua, now=0)
    pop(lua, worker="w2", now=61)  # courtesy notice
    assert r.hget("ql:j:j", "grace") == "1"
    lua("heartbeat", 62, "j", "w")
    assert r.hget("ql:j:j", "grace") is None


def test_cancel_untracks(lua: Any, r: redis.Redis) -> None:
    """Canceling a tracked job removes it from ql:tracked."""
    put(lua, "j")
    lua("track", 0, "track", "j")
    lua("cancel", 0, "j")
    assert r.zcard("ql:tracked") == 0


def test_tag_counts_stay_honest(lua: Any, r: redis.Redis) -> None:
    """Count a tag once per job and drop it from ql:tags at zero."""
    put(lua, "j", tags='["a"]')
    lua("tag", 0, "add", "j", "a", "b", "b")
    assert r.zscore("ql:tags", "a") == 1
    assert r.zscore("ql:tags", "b") == 1
    lua("tag", 0, "remove", "j", "a", "zzz")
    assert r.zscore("ql:tags", "a") is None
    assert r.zscore("ql:tags", "zzz") is None


def test_ghost_jid_is_skipped_by_pop(lua: Any, r: redis.Redis) -> None:
    """A jid in the work set without a hash is dropped, the real job still popped."""
    put(lua, "real")
    r.zadd("ql:q:q-work", {"ghost": 100})
    [job] = pop(lua)
    assert job["jid"] == "real"
    assert r.zcard("ql:q:q-work") == 0


def test_put_refuses_recurring_child_jid(lua: Any) -> None:
    """A new job named like a recurring job's child is refused."""
    lua("recur", 0, Q, "rec", "K", "{}", "interval", 60, 0)
    with pytest.raises(redis.ResponseError, match="collides with recurring job rec"):
        put(lua, "rec-3")


def test_completed_expiry_removes_tracking(lua: Any, r: redis.Redis) -> None:
    """Expired completed jobs leave no tracked entry, tag count or dependency set."""
    lua("config.set", 0, "jobs-history-count", 1)
    for jid in ("a", "b"):
        put(lua, jid, tags='["t"]')
        lua("track", 0, "track", jid)
        pop(lua)
        lua("complete", 2, jid, "w", Q, "{}")
    assert r.exists("ql:j:a") == 0
    assert r.zrange("ql:tracked", 0, -1) == ["b"]
    assert r.zscore("ql:tags", "t") == 1


# -- paging and listing extensions -------------------------------------------------------------


def test_peek_offset_and_jobs_waiting(lua: Any) -> None:
    """Page the waiting jobs in pop order."""
    for n in range(5):
        put(lua, f"j{n}", now=n)
    assert [j["jid"] for j in lua.json("peek", 10, Q, 2, 2)] == ["j2", "j3"]
    assert lua("jobs", 10, "waiting", Q, 1, 3) == ["j1", "j2", "j3"]


# -- reserve / complete.reserve ----------------------------------------------------------------


def test_reserve_empty_reports_wake(lua: Any) -> None:
    """Return an empty list and the seconds until the next scheduled job (-1 if none)."""
    assert lua.json("reserve", 0, "w", 1, "a", "b") == {"jobs": [], "wake": -1}
    put(lua, "s", "b", now=0, delay=30)
    assert lua.json("reserve", 10, "w", 1, "a", "b") == {"jobs": [], "wake": 20}


def test_reserve_takes_in_queue_order_lean(lua: Any) -> None:
    """Take from the first queue before the next; lean objects have no history."""
    put(lua, "b1", "b")
    put(lua, "a1", "a")
    reply = lua.json("reserve", 1, "w", 3, "a", "b")
    assert [j["jid"] for j in reply["jobs"]] == ["a1", "b1"]
    assert "wake" not in reply
    assert "history" not in reply["jobs"][0]
    assert reply["jobs"][0]["state"] == "running"
    assert lua.json("get", 1, "a1")["history"][-1]["what"] == "popped"


def test_complete_reserve(lua: Any, r: redis.Redis) -> None:
    """Complete then reserve the next job in one call."""
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    pop(lua)
    reply = lua.json("complete.reserve", 2, "a", "w", Q, '{"x": []}', "", 1, Q)
    assert reply["state"] == "complete"
    assert [j["jid"] for j in reply["jobs"]] == ["b"]
    assert r.hget("ql:j:a", "data") == '{"x": []}'
    assert lua.json("complete.reserve", 3, "b", "w", Q, "{}", "", 0) == {
        "state": "complete", "jobs": [], "wake": -1}


# -- throttles ---------------------------------------------------------------------------------


def test_throttle_limits_and_releases(lua: Any, events: Any) -> None:
    """Hold back a job over the maximum and let it back on completion."""
    lua("throttle.set", 0, "t", 1)
    put(lua, "a", now=0, throttles='["t"]')
    put(lua, "b", now=1, throttles='["t"]')
    assert [j["jid"] for j in pop(lua, count=2, now=2)] == ["a"]
    assert lua("jobs", 2, "throttled", Q) == ["b"]
    assert lua.json("get", 2, "b")["state"] == "throttled"
    assert lua("throttle.locks", 2, "t") == ["a"]
    assert lua("throttle.pending", 2, "t") == ["b"]
    assert lua.json("queues", 2, Q)["throttled"] == 1
    events()
    lua("complete", 3, "a", "w", Q, "{}")
    assert wakes(events()) == ["ql:wake:q"]
    assert lua("throttle.locks", 3, "t") == []
    assert [j["jid"] for j in pop(lua, now=4)] == ["b"]
    assert lua.json("throttle.get", 4, "t") == {"id": "t", "maximum": 1, "ttl": -1}
    assert lua.json("throttle.get", 4, "none") == {"id": "none", "maximum": 0, "ttl": -2}


def test_queue_throttle(lua: Any) -> None:
    """The queue throttle ql:q:<queue> caps running jobs of that queue."""
    lua("queue.throttle.set", 0, Q, 2)
    for n in range(4):
        put(lua, f"j{n}", now=n)
    assert len(pop(lua, count=4, now=5)) == 2
    assert lua.json("queue.throttle.get", 5, Q)["maximum"] == 2
    lua("fail", 6, "j0", "w", "g", "m")
    assert [j["jid"] for j in pop(lua, count=4, now=7)] == ["j2"]


def test_unthrottled_queue_has_no_throttle_keys(lua: Any, r: redis.Redis) -> None:
    """Jobs without throttles leave no throttle keys behind."""
    put(lua, "a")
    pop(lua)
    lua("complete", 2, "a", "w", Q, "{}")
    assert r.keys("ql:th:*") == []


# -- bookkeeping that lets pop and complete skip scans -----------------------------------------


def test_scheduled_job_after_a_pop_cycle_is_not_missed(lua: Any) -> None:
    """A delayed put after pop recorded the next lock expiry still pops on time."""
    put(lua, "a", now=0)
    pop(lua, now=1)
    lua("complete", 2, "a", "w", Q, "{}")
    put(lua, "b", now=3, delay=5)
    assert pop(lua, now=7) == {}
    assert [j["jid"] for j in pop(lua, now=8)] == ["b"]


def test_shorter_heartbeat_lock_is_noticed(lua: Any) -> None:
    """Lowering the heartbeat between pops does not hide the earlier lock expiry."""
    put(lua, "a", now=0)
    put(lua, "b", now=0)
    pop(lua, now=1)  # b (ties pop in reverse jid order), lock until 61
    lua("config.set", 1, "heartbeat", 5)
    pop(lua, now=2)  # a, lock until 7
    events_free = pop(lua, worker="w2", now=8)
    assert events_free == {}
    assert lua.json("get", 8, "a")["history"][-1]["what"] == "timed-out"
    assert lua.json("get", 8, "b")["history"][-1]["what"] == "popped"


def test_recur_registered_later_spawns_on_time(lua: Any) -> None:
    """A recurring job added after the queue's bound was set spawns when due."""
    put(lua, "a", now=0)
    pop(lua, now=1)
    lua("recur", 2, Q, "rec", "K", "{}", "interval", 60, 3)
    assert pop(lua, now=4, worker="w2") == {}
    assert pop(lua, now=5, worker="w2")[0]["jid"] == "rec-1"


def test_bookkeeping_fields_are_hidden(lua: Any, r: redis.Redis) -> None:
    """'#' fields stay out of config.get and cannot be set by clients."""
    put(lua, "a")
    pop(lua)
    assert r.hget("ql:config", "#due:q") is not None
    assert not any(k.startswith("#") for k in lua.json("config.get", 0))
    for command in ("config.set", "config.unset"):
        with pytest.raises(redis.ResponseError, match="invalid"):
            lua(command, 0, "#due:q", "0")


def test_missing_bookkeeping_falls_back_to_scans(lua: Any, r: redis.Redis) -> None:
    """Data written without the '#due' bound (e.g. by qless-core) is scanned."""
    put(lua, "a", now=0)
    pop(lua, now=1)
    r.hdel("ql:config", "#due:q")
    assert pop(lua, worker="w2", now=100) == {}
    assert lua.json("get", 100, "a")["history"][-1]["what"] == "timed-out"


def test_age_retention_after_lowering_jobs_history(lua: Any, r: redis.Redis) -> None:
    """Completed jobs older than jobs-history go once the bound passes."""
    lua("config.set", 0, "jobs-history", 100)
    for jid, t in (("a", 0), ("b", 50), ("c", 149)):
        put(lua, jid, now=t)
        pop(lua, now=t)
        lua("complete", t, jid, "w", Q, "{}")
    assert r.zrange("ql:completed", 0, -1) == ["b", "c"]
    lua("config.set", 151, "jobs-history", 10)
    put(lua, "d", now=152)
    pop(lua, now=152)
    lua("complete", 152, "d", "w", Q, "{}")
    assert r.zrange("ql:completed", 0, -1) == ["c", "d"]


def test_pause_written_by_another_engine_is_honoured(lua: Any, r: redis.Redis) -> None:
    """A queue in ql:paused_queues without our mirror field is still paused."""
    put(lua, "a")
    r.sadd("ql:paused_queues", Q)
    assert pop(lua) == {}
    lua("unpause", 1, Q)
    assert [j["jid"] for j in pop(lua)] == ["a"]


ALL_COMMANDS = [
    "put", "requeue", "pop", "peek", "complete", "fail", "retry", "heartbeat", "timeout",
    "cancel", "depends", "priority", "log", "tag", "track", "get", "multiget", "jobs", "failed",
    "unfail", "queues", "length", "pause", "unpause", "queue.forget", "workers",
    "worker.deregister", "stats", "config.get", "config.set", "config.unset", "recur",
    "recur.get", "recur.update", "recur.tag", "recur.untag", "unrecur",
    # extensions
    "reserve", "complete.reserve", "throttle.set", "throttle.get", "throttle.delete",
    "throttle.locks", "throttle.pending", "throttle.release", "queue.throttle.set",
    "queue.throttle.get",
]


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_every_command_is_routed(lua: Any, command: str) -> None:
    """Each command loads its modules and runs (argument errors are fine, unknown is not)."""
    try:
        lua(command, 0)
    except redis.ResponseError as exc:
        assert "Unknown command" not in str(exc)
        assert "attempt to" not in str(exc)  # no call into a module that was not loaded
        assert re.search(r"user_(script|function):\d+: \S+\(\): ", str(exc)), str(exc)


def test_unknown_command(lua: Any) -> None:
    """Refuse names that are not commands, including route-table fragments."""
    for name in ("nope", "pu", "put=x", "throttle", "p.t"):
        with pytest.raises(redis.ResponseError, match="Unknown command"):
            lua(name, 0)


def test_capped_queue_wakes_when_a_slot_frees(lua: Any, events: Any) -> None:
    """With <queue>-max-concurrency, finishing a job wakes idle workers of the queue."""
    lua("config.set", 0, "q-max-concurrency", 1)
    put(lua, "a", now=0)
    put(lua, "b", now=1)
    assert [j["jid"] for j in pop(lua, count=2, now=2)] == ["a"]
    events()
    lua("complete", 3, "a", "w", Q, "{}")
    assert wakes(events()) == ["ql:wake:q"]
    assert [j["jid"] for j in pop(lua, count=2, now=4)] == ["b"]


@pytest.mark.parametrize("how", ["cancel", "timeout", "fail", "retry", "put"])
def test_throttle_slot_released(lua: Any, how: str) -> None:
    """Every way out of `running` gives the throttle slot back."""
    lua("throttle.set", 0, "t", 1)
    put(lua, "a", now=0, throttles='["t"]')
    put(lua, "b", now=1, throttles='["t"]')
    assert [j["jid"] for j in pop(lua, count=2, now=2)] == ["a"]
    calls = {
        "cancel": ("cancel", 3, "a"),
        "timeout": ("timeout", 3, "a"),
        "fail": ("fail", 3, "a", "w", "g", "m"),
        "retry": ("retry", 3, "a", Q, "w", 100),
        "put": ("put", 3, "w", "q2", "a", "K", "{}", 0),
    }
    lua(*calls[how])
    assert lua("throttle.locks", 3, "t") == []
    assert lua.json("get", 3, "b")["state"] == "waiting"
    # a timed-out job sits at +inf in work, so it takes the slot again before b
    expected = ["a"] if how == "timeout" else ["b"]
    assert [j["jid"] for j in pop(lua, count=2, now=4)] == expected
