"""Compact history: a job's first visit lives in the legacy `history` hash field."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

Q = "queue"
HIST = "ql:j:jid-history"
# Job data longer than 64 bytes: the job hash is a real hash table anyway, so the field may grow.
BIG = json.dumps({"payload": "x" * 80})


def put(lua: Any, jid: str = "jid", queue: str = Q, now: float = 0, *opts: Any,
        data: str = "{}") -> Any:
    """Put a job (empty data unless given)."""
    return lua("put", now, "w", queue, jid, "K", data, 0, *opts)


def pop(lua: Any, now: float = 1, worker: str = "w", queue: str = Q) -> Any:
    """Pop one job (full objects)."""
    return lua.json("pop", now, queue, worker, 1)


def complete(lua: Any, now: float = 2, jid: str = "jid", worker: str = "w", *opts: Any) -> Any:
    """Complete a running job."""
    return lua("complete", now, jid, worker, Q, "{}", *opts)


def field(r: redis.Redis, jid: str = "jid") -> Any:
    """The job's `history` field, decoded (None when absent or `[]`, the migrated form)."""
    text = r.hget(f"ql:j:{jid}", "history")
    return None if text is None else json.loads(text) or None


def whats(lua: Any, jid: str = "jid", now: float = 100) -> list[str]:
    """The `what` of every history entry `get` reports."""
    return [h["what"] for h in lua.json("get", now, jid)["history"]]


def to_list(r: redis.Redis, jid: str = "jid") -> None:
    """Rewrite a compact job the way a list-only writer stores it (independent expansion)."""
    visits = json.loads(r.hget(f"ql:j:{jid}", "history"))
    entries = []
    for v in visits:
        entries.append([v["put"], "put", {"q": v["q"]}])
        if "popped" in v:
            entries.append([v["popped"], "popped", {"worker": v["worker"]}])
        if "done" in v:
            entries.append([v["done"], "done"])
    r.rpush(f"ql:j:{jid}-history", *[json.dumps(e, separators=(",", ":")) for e in entries])
    r.hdel(f"ql:j:{jid}", "history")


# -- storage ----------------------------------------------------------------------------------


def test_first_visit_needs_no_list(lua: Any, r: redis.Redis) -> None:
    """Put, pop and complete keep the whole history in the field, with floor(now) times."""
    put(lua, now=10.9)
    assert field(r) == [{"q": Q, "put": 10}]
    pop(lua, now=20.5, worker="w")
    assert field(r) == [{"q": Q, "put": 10, "popped": 20, "worker": "w"}]
    assert complete(lua, 30.2) == "complete"
    assert field(r) == [{"q": Q, "put": 10, "popped": 20, "worker": "w", "done": 30}]
    assert not r.exists(HIST)
    assert lua.json("get", 40, "jid")["history"] == [
        {"when": 10, "what": "put", "q": Q},
        {"when": 20, "what": "popped", "worker": "w"},
        {"when": 30, "what": "done"},
    ]


def test_reserve_path_is_compact(lua: Any, r: redis.Redis) -> None:
    """reserve and complete.reserve extend the field the same way."""
    put(lua, "a")
    put(lua, "b")
    lua("reserve", 1, "w", 1, Q)
    lua("complete.reserve", 2, "b", "w", Q, "{}", "", 1, Q)
    assert field(r, "b") == [{"q": Q, "put": 0, "popped": 1, "worker": "w", "done": 2}]
    assert field(r, "a") == [{"q": Q, "put": 0, "popped": 2, "worker": "w"}]
    assert r.keys("ql:j:*-history") == []


def test_spawned_child_is_compact(lua: Any, r: redis.Redis) -> None:
    """A recurring child's first put is compact, at the floor of its scheduled time."""
    lua("recur", 0, Q, "rec", "K", "{}", "interval", 60, 0)
    pop(lua, now=0.5)
    assert field(r, "rec-1") == [{"q": Q, "put": 0, "popped": 0, "worker": "w"}]
    assert not r.exists("ql:j:rec-1-history")


def test_time_field_is_short_and_exact(lua: Any, r: redis.Redis) -> None:
    """`time` reads back as exactly the same number, in at most 17 significant digits."""
    for now in (1700000000.123456, 1700000000, 0.1, 1700000000.75):
        put(lua, now=now)
        text = r.hget("ql:j:jid", "time")
        assert float(text) == now and len(text.replace(".", "").lstrip("0")) <= 17


# -- reads are identical to the list form -----------------------------------------------------


@pytest.mark.parametrize("stage", ["put", "popped", "done"])
def test_compact_reads_like_list(lua: Any, r: redis.Redis, stage: str) -> None:
    """get, multiget, peek and track give byte-identical replies for either storage."""
    put(lua, now=1700000000.5, data=BIG)
    lua("track", 1700000000.5, "track", "jid")
    if stage != "put":
        pop(lua, now=1700000003.25, worker="w1")
    if stage == "done":
        assert lua("complete", 1700000007.75, "jid", "w1", Q, BIG) == "complete"

    def replies() -> list[Any]:
        return [lua("get", 1700000010, "jid"), lua("multiget", 1700000010, "jid"),
                lua("peek", 1700000010, Q, 5), lua("track", 1700000010)]

    compact = replies()
    assert r.hexists("ql:j:jid", "history") and not r.exists(HIST)
    to_list(r)
    assert replies() == compact
    assert not r.hexists("ql:j:jid", "history")


def test_pop_reply_like_list(lua: Any, r: redis.Redis) -> None:
    """The full job object pop returns is the same as for a job whose history is a list."""
    put(lua, "a", Q, 5.5)
    put(lua, "b", Q, 5.5)
    to_list(r, "b")
    got = lua.json("pop", 9, Q, "w", 2)
    by_jid = {j["jid"]: j for j in got}
    assert by_jid["a"]["history"] == by_jid["b"]["history"] == [
        {"when": 5, "what": "put", "q": Q}, {"when": 9, "what": "popped", "worker": "w"}]
    assert field(r, "a") is not None and field(r, "b") is None
    assert r.lrange("ql:j:b-history", 0, -1) == ['[5,"put",{"q":"queue"}]',
                                                  '[9,"popped",{"worker":"w"}]']


@pytest.mark.parametrize("data", ["{}", BIG])
@pytest.mark.parametrize("worker", ["w", 'odd"\\/worker'])
def test_pop_reply_bytes_like_list(lua: Any, r: redis.Redis, worker: str, data: str) -> None:
    """pop's raw reply for a compact job equals the reply for the same job stored as a list."""
    put(lua, "jid", Q, 1700000000.5, data=data)
    compact = lua("pop", 1700000009.5, Q, worker, 1)
    assert (field(r) is not None) == (data == BIG)
    r.flushdb()
    put(lua, "jid", Q, 1700000000.5, data=data)
    to_list(r)
    assert lua("pop", 1700000009.5, Q, worker, 1) == compact
    assert r.hget("ql:j:jid", "history") is None


def test_huge_clock_takes_generic_path(lua: Any, r: redis.Redis) -> None:
    """Times cjson cannot write exactly (>= 1e14) are never extended compactly."""
    put(lua, now=1e14 + 5)
    pop(lua, now=1e14 + 7)
    assert field(r) is None
    assert whats(lua, now=1e14 + 8) == ["put", "popped"]


# -- the field never turns a compact-encoded job hash into a hash table ------------------------


def test_small_job_keeps_field_short(lua: Any, r: redis.Redis) -> None:
    """With small values, a field that would pass 64 bytes is migrated instead of extended."""
    put(lua, now=1700000000)
    assert len(r.hget("ql:j:jid", "history")) <= 64
    pop(lua, now=1700000001, worker="a-rather-long-worker-name")
    assert field(r) is None
    assert whats(lua) == ["put", "popped"]
    assert complete(lua, 1700000002, "jid", "a-rather-long-worker-name") == "complete"
    assert whats(lua) == ["put", "popped", "done"]
    assert r.object("encoding", "ql:j:jid") in ("listpack", "ziplist")


def test_small_job_short_names_compact_until_done(lua: Any, r: redis.Redis) -> None:
    """Short names fit the first pop in 64 bytes; the completion then migrates."""
    put(lua, "jid", "q", 1700000000)
    pop(lua, 1700000001, "w", "q")
    assert field(r) == [{"q": "q", "put": 1700000000, "popped": 1700000001, "worker": "w"}]
    assert lua("complete", 1700000002, "jid", "w", "q", "{}") == "complete"
    assert field(r) is None and r.llen(HIST) == 3
    assert r.object("encoding", "ql:j:jid") in ("listpack", "ziplist")


def test_long_queue_name_uses_list(lua: Any, r: redis.Redis) -> None:
    """A first put whose field would pass 64 bytes goes to the list as before."""
    queue = "q" * 40
    put(lua, "jid", queue, 1700000000)
    assert field(r) is None and r.llen(HIST) == 1
    put(lua, "big", queue, 1700000000, data=BIG)
    assert field(r, "big") == [{"q": queue, "put": 1700000000}]


def test_big_data_stays_compact_to_done(lua: Any, r: redis.Redis) -> None:
    """A job hash that already holds a long value keeps the whole first visit in the field."""
    put(lua, now=1700000000, data=BIG)
    pop(lua, now=1700000001, worker="a-rather-long-worker-name")
    assert lua("complete", 1700000002, "jid", "a-rather-long-worker-name", Q, BIG) == "complete"
    assert [*field(r)[0]] == ["q", "put", "popped", "worker", "done"]
    assert not r.exists(HIST)


def test_completion_with_long_data_stays_compact(lua: Any, r: redis.Redis) -> None:
    """Completing with data longer than 64 bytes makes room for the `done` time."""
    put(lua, "jid", "q", 1700000000)
    pop(lua, 1700000001, "w", "q")
    assert lua("complete", 1700000002, "jid", "w", "q", BIG) == "complete"
    assert field(r)[0]["done"] == 1700000002 and not r.exists(HIST)


def test_reads_do_not_migrate(lua: Any, r: redis.Redis) -> None:
    """get leaves the field in place."""
    put(lua)
    before = r.hgetall("ql:j:jid")
    lua("get", 5, "jid")
    lua("multiget", 5, "jid")
    assert r.hgetall("ql:j:jid") == before and not r.exists(HIST)


# -- every other event migrates ---------------------------------------------------------------


def running(lua: Any, *opts: Any) -> None:
    """A compact job popped by worker w at 1."""
    put(lua, "jid", Q, 0, *opts)
    pop(lua)


MIGRATIONS: dict[str, tuple[Any, list[str]]] = {
    "second put": (lambda lua: put(lua, "jid", Q, 5), ["put", "popped", "put"]),
    "requeue": (lambda lua: lua("requeue", 5, "w", "other", "jid", "K", "{}", 0),
                ["put", "popped", "put"]),
    "log": (lambda lua: lua("log", 5, "jid", "hello", '{"x":1}'), ["put", "popped", "hello"]),
    "fail": (lambda lua: lua("fail", 5, "jid", "w", "grp", "boom"), ["put", "popped", "failed"]),
    "timeout": (lambda lua: lua("timeout", 5, "jid"), ["put", "popped", "timed-out"]),
    "advance": (lambda lua: complete(lua, 5, "jid", "w", "next", "q2"),
                ["put", "popped", "done", "put"]),
    "second pop after retry": (lambda lua: (lua("retry", 5, "jid", Q, "w"), pop(lua, 6)),
                               ["put", "popped", "popped"]),
    "lock loss": (lambda lua: pop(lua, 1000, "w2"), ["put", "popped", "timed-out"]),
    "retries exhausted": (lambda lua: (lua("retry", 5, "jid", Q, "w"), pop(lua, 6),
                                       lua("retry", 7, "jid", Q, "w")),
                          ["put", "popped", "popped", "failed"]),
}


@pytest.mark.parametrize("event", list(MIGRATIONS))
def test_event_migrates(lua: Any, r: redis.Redis, event: str) -> None:
    """The field is expanded into the list (before the new entry) and deleted."""
    running(lua, "retries", 1)
    action, expected = MIGRATIONS[event]
    action(lua)
    assert field(r) is None
    entries = [json.loads(e) for e in r.lrange(HIST, 0, -1)]
    assert [e[1] for e in entries] == expected
    assert entries[0] == [0, "put", {"q": Q}] and entries[1] == [1, "popped", {"worker": "w"}]
    assert whats(lua) == expected


def test_retry_keeps_field_until_next_event(lua: Any, r: redis.Redis) -> None:
    """retry writes no history entry, so the field stays until something is appended."""
    running(lua)
    lua("retry", 5, "jid", Q, "w")
    assert field(r) == [{"q": Q, "put": 0, "popped": 1, "worker": "w"}]
    assert not r.exists(HIST)


def test_unfail_migrates(lua: Any, r: redis.Redis) -> None:
    """A failed job put back by unfail has its whole history in the list."""
    running(lua)
    lua("fail", 5, "jid", "w", "grp", "boom")
    lua("unfail", 6, Q, "grp", 10)
    assert whats(lua) == ["put", "popped", "failed", "put"] and field(r) is None


def test_cancel_and_retention_delete_field(lua: Any, r: redis.Redis) -> None:
    """The field goes with the hash: cancel and completed-job expiry leave nothing."""
    put(lua, "a")
    lua("cancel", 1, "a")
    lua("config.set", 2, "jobs-history", 0)
    put(lua, "b", Q, 2)
    pop(lua, 3)
    complete(lua, 4, "b")
    assert r.keys("ql:j:*") == []


def test_foreign_legacy_field_migrates_on_pop(lua: Any, r: redis.Redis) -> None:
    """A legacy field in another layout (old qless) is never extended, only migrated."""
    put(lua)
    r.hset("ql:j:jid", "history", '[{"q": "queue", "put": 0}]')
    pop(lua, 3)
    assert field(r) is None
    assert whats(lua) == ["put", "popped"]


def test_history_cap_holds_through_migration(lua: Any, r: redis.Redis) -> None:
    """max-job-history 3: migrating 2 entries plus 2 logs trims as appending one by one did."""
    lua("config.set", 0, "max-job-history", 3)
    running(lua)
    lua("log", 5, "jid", "one")
    lua("log", 6, "jid", "two")
    assert whats(lua) == ["put", "one", "two"]
    assert r.llen(HIST) == 3


def test_history_cap_on_full_compact_job(lua: Any, r: redis.Redis) -> None:
    """A completed compact job (3 entries) logged once with cap 3 keeps put, done, log."""
    lua("config.set", 0, "max-job-history", 3)
    running(lua)
    complete(lua, 2)
    lua("log", 5, "jid", "later")
    assert whats(lua) == ["put", "done", "later"]


def test_migrated_field_left_empty(lua: Any, r: redis.Redis) -> None:
    """pop and complete migrate by writing `[]` in their own HSET; `[]` reads as nothing."""
    put(lua, now=1700000000)
    pop(lua, now=1700000001, worker="a-rather-long-worker-name")
    assert r.hget("ql:j:jid", "history") == "[]"
    assert r.lrange(HIST, 0, -1) == ['[1700000000,"put",{"q":"queue"}]',
                                     '[1700000001,"popped",{"worker":"a-rather-long-worker-name"}]']
    lua("log", 1700000002, "jid", "note")
    assert r.llen(HIST) == 3
    assert whats(lua) == ["put", "popped", "note"]
    assert r.hget("ql:j:jid", "history") == "[]"


@pytest.mark.parametrize("worker", ["a-rather-long-worker-name", 'odd"\\/w-rather-long-name'])
@pytest.mark.parametrize("stage", ["pop", "complete"])
def test_migrated_entries_match_generic_expansion(lua: Any, r: redis.Redis, worker: str,
                                                  stage: str) -> None:
    """Entries migrated from the engine's own field equal those from a re-spaced legacy field."""
    def run(respace: bool) -> list[str]:
        r.flushdb()
        # complete: big data lets the pop extend the field; completing with "{}" then
        # does not know the hash is roomy and migrates put + popped + done.
        put(lua, "jid", "q", 1700000000.5, data=BIG if stage == "complete" else "{}")
        if stage == "complete":
            lua("pop", 1700000001.5, "q", worker, 1)
            assert field(r)[0]["worker"] == worker
        if respace:  # same content, another writer's layout: only the generic path reads it
            r.hset("ql:j:jid", "history", json.dumps(json.loads(r.hget("ql:j:jid", "history"))))
        if stage == "pop":
            lua("pop", 1700000002.5, "q", worker, 1)
        else:
            assert lua("complete", 1700000002.5, "jid", worker, "q", "{}") == "complete"
        assert field(r) is None
        return r.lrange(HIST, 0, -1)

    own = run(False)
    assert len(own) == (2 if stage == "pop" else 3)
    assert own == run(True)
