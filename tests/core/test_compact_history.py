"""Compact history: a job's first visit needs no history list (docs/compatibility.md)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

Q = "queue"
HIST = "ql:j:jid-history"
BIG = json.dumps({"payload": "x" * 80})
T0 = 1700000000


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


def visit(r: redis.Redis, jid: str = "jid") -> Any:
    """The job's `visit` field (None when absent)."""
    return r.hget(f"ql:j:{jid}", "visit")


def whats(lua: Any, jid: str = "jid", now: float = 100) -> list[str]:
    """The `what` of every history entry `get` reports."""
    return [h["what"] for h in lua.json("get", now, jid)["history"]]


def entry(when: int, what: str, extra: dict[str, str] | None = None) -> str:
    """A history list entry as the engine writes it (cjson escapes `/`)."""
    parts: list[Any] = [when, what] + ([extra] if extra else [])
    return json.dumps(parts, separators=(",", ":")).replace("/", "\\/")


def to_list(r: redis.Redis, entries: list[str], jid: str = "jid") -> None:
    """Store a job's history the way a list-only writer does (no `visit`, a list)."""
    r.hdel(f"ql:j:{jid}", "visit", "history")
    r.delete(f"ql:j:{jid}-history")
    r.rpush(f"ql:j:{jid}-history", *entries)


def no_history_stored(r: redis.Redis, jid: str = "jid") -> bool:
    """True when the job hash holds neither history field and the job has no list."""
    h = r.hgetall(f"ql:j:{jid}")
    return "history" not in h and "visit" not in h and not r.exists(f"ql:j:{jid}-history")


# -- storage ----------------------------------------------------------------------------------


def test_first_visit_needs_no_list(lua: Any, r: redis.Redis) -> None:
    """Put stores nothing; pop and complete write `visit` with offsets from `time`."""
    put(lua, now=T0 + 10.9)
    assert no_history_stored(r)
    assert r.hget("ql:j:jid", "time") == "1700000010.9"
    pop(lua, now=T0 + 20.5, worker="w")
    assert visit(r) == f"10:{Q}:w" and r.hget("ql:j:jid", "time") == "1700000020.5"
    assert complete(lua, T0 + 30.25) == "complete"
    assert visit(r) == f"10:10:{Q}:w" and r.hget("ql:j:jid", "time") == "1700000030.25"
    assert not r.exists(HIST) and r.hget("ql:j:jid", "history") is None
    assert lua.json("get", T0 + 40, "jid")["history"] == [
        {"when": T0 + 10, "what": "put", "q": Q},
        {"when": T0 + 20, "what": "popped", "worker": "w"},
        {"when": T0 + 30, "what": "done"},
    ]


def test_reserve_path_is_compact(lua: Any, r: redis.Redis) -> None:
    """reserve and complete.reserve write `visit` the same way: no list key at all."""
    put(lua, "a")
    put(lua, "b")
    lua("reserve", 1, "w", 1, Q)
    lua("complete.reserve", 2, "b", "w", Q, "{}", "", 1, Q)
    assert visit(r, "b") == f"1:1:{Q}:w"
    assert visit(r, "a") == f"2:{Q}:w"
    assert r.keys("ql:j:*-history") == []


def test_spawned_child_is_compact(lua: Any, r: redis.Redis) -> None:
    """A recurring child's put is implied at its scheduled time; its pop writes `visit`."""
    lua("recur", 0, Q, "rec", "K", "{}", "interval", 60, 0)
    assert lua.json("peek", 0.5, Q, 1)[0]["history"] == [{"when": 0, "what": "put", "q": Q}]
    assert no_history_stored(r, "rec-1")
    pop(lua, now=0.5)
    assert visit(r, "rec-1") == f"0:{Q}:w" and not r.exists("ql:j:rec-1-history")


@pytest.mark.parametrize(("now", "text"), [
    (T0 + 0.123456, "1700000000.123"), (T0, "1700000000"), (0.1, "0.1"),
    (T0 + 0.75, "1700000000.75"), (T0 + 0.3, "1700000000.3"),
    (T0 + 0.9999, "1700000000.999"), (T0 + 0.0004, "1700000000")])
def test_time_field_to_the_millisecond(lua: Any, r: redis.Redis, now: float, text: str) -> None:
    """`time` is `now` to the millisecond, never rounded into the next second."""
    put(lua, now=now)
    assert r.hget("ql:j:jid", "time") == text
    assert lua.json("get", now, "jid")["history"][0]["when"] == int(now)


# -- reads are identical to the list form -----------------------------------------------------


@pytest.mark.parametrize("stage", ["put", "popped", "done"])
def test_compact_reads_like_list(lua: Any, r: redis.Redis, stage: str) -> None:
    """get, multiget, peek, track and jobs give byte-identical replies for either storage."""
    put(lua, now=T0 + 0.5, data=BIG)
    lua("track", T0 + 0.5, "track", "jid")
    entries = [entry(T0, "put", {"q": Q})]
    if stage != "put":
        pop(lua, now=T0 + 3.25, worker="w/1")
        entries.append(entry(T0 + 3, "popped", {"worker": "w/1"}))
    if stage == "done":
        assert lua("complete", T0 + 7.75, "jid", "w/1", Q, BIG) == "complete"
        entries.append(entry(T0 + 7, "done"))

    def replies() -> list[Any]:
        return [lua("get", T0 + 10, "jid"), lua("multiget", T0 + 10, "jid"),
                lua("peek", T0 + 10, Q, 5), lua("track", T0 + 10),
                lua("jobs", T0 + 10, "complete"), lua("jobs", T0 + 10, "running", Q)]

    compact = replies()
    assert not r.exists(HIST)
    to_list(r, entries)
    assert replies() == compact


def test_pop_reply_like_list(lua: Any, r: redis.Redis) -> None:
    """The full job object pop returns is the same as for a job whose history is a list."""
    put(lua, "a", Q, 5.5)
    put(lua, "b", Q, 5.5)
    to_list(r, [entry(5, "put", {"q": Q})], "b")
    got = lua.json("pop", 9, Q, "w", 2)
    by_jid = {j["jid"]: j for j in got}
    assert by_jid["a"]["history"] == by_jid["b"]["history"] == [
        {"when": 5, "what": "put", "q": Q}, {"when": 9, "what": "popped", "worker": "w"}]
    assert visit(r, "a") == f"4:{Q}:w" and visit(r, "b") is None
    assert r.lrange("ql:j:b-history", 0, -1) == [entry(5, "put", {"q": Q}),
                                                  entry(9, "popped", {"worker": "w"})]


@pytest.mark.parametrize("data", ["{}", BIG])
@pytest.mark.parametrize("worker", ["w", 'odd"\\/worker', "w" * 60])
def test_pop_reply_bytes_like_list(lua: Any, r: redis.Redis, worker: str, data: str) -> None:
    """pop's raw reply for a compact job equals the reply for the same job stored as a list."""
    put(lua, "jid", Q, T0 + 0.5, data=data)
    compact = lua("pop", T0 + 9.5, Q, worker, 1)
    assert (visit(r) is not None) == (len(worker) < 50)
    r.flushdb()
    put(lua, "jid", Q, T0 + 0.5, data=data)
    to_list(r, [entry(T0, "put", {"q": Q})])
    assert lua("pop", T0 + 9.5, Q, worker, 1) == compact


def test_huge_clock_takes_generic_path(lua: Any, r: redis.Redis) -> None:
    """Times of 1e14 s or more are never kept in `visit`."""
    put(lua, now=1e14 + 5)
    pop(lua, now=1e14 + 7)
    assert visit(r) is None
    assert whats(lua, now=1e14 + 8) == ["put", "popped"]


# -- `visit` never turns a compact-encoded job hash into a hash table --------------------------


def test_long_names_go_to_the_list(lua: Any, r: redis.Redis) -> None:
    """A `visit` that would pass 64 bytes is not written: put + popped go to the list."""
    worker = "w" * 58
    put(lua, now=T0)
    pop(lua, now=T0 + 1, worker=worker)
    assert visit(r) is None
    assert r.lrange(HIST, 0, -1) == [entry(T0, "put", {"q": Q}),
                                     entry(T0 + 1, "popped", {"worker": worker})]
    assert complete(lua, T0 + 2, "jid", worker) == "complete"
    assert whats(lua) == ["put", "popped", "done"]
    assert r.object("encoding", "ql:j:jid") in ("listpack", "ziplist")


def test_completion_past_the_limit_migrates(lua: Any, r: redis.Redis) -> None:
    """A pop that fits and a completion that would not: all three entries go to the list."""
    worker = "w" * (64 - len(f"1:{Q}:"))
    put(lua, now=T0)
    pop(lua, now=T0 + 1, worker=worker)
    assert visit(r) == f"1:{Q}:{worker}" and len(visit(r)) == 64
    assert complete(lua, T0 + 2, "jid", worker) == "complete"
    assert visit(r) is None and r.llen(HIST) == 3
    assert r.object("encoding", "ql:j:jid") in ("listpack", "ziplist")


def test_reads_do_not_migrate(lua: Any, r: redis.Redis) -> None:
    """get and multiget leave the stored form alone."""
    put(lua)
    before = r.hgetall("ql:j:jid")
    lua("get", 5, "jid")
    lua("multiget", 5, "jid")
    pop(lua, 6)
    before = r.hgetall("ql:j:jid")
    lua("get", 7, "jid")
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
    "retry": (lambda lua: lua("retry", 5, "jid", Q, "w"), ["put", "popped", "retry"]),
    "second pop after retry": (lambda lua: (lua("retry", 5, "jid", Q, "w"), pop(lua, 6)),
                               ["put", "popped", "retry", "popped"]),
    "lock loss": (lambda lua: pop(lua, 1000, "w2"), ["put", "popped", "timed-out"]),
    "retries exhausted": (lambda lua: (lua("retry", 5, "jid", Q, "w"), pop(lua, 6),
                                       lua("retry", 7, "jid", Q, "w")),
                          ["put", "popped", "retry", "popped", "failed"]),
}


@pytest.mark.parametrize("event", list(MIGRATIONS))
def test_event_migrates(lua: Any, r: redis.Redis, event: str) -> None:
    """`visit` is expanded into the list (before the new entry) and deleted."""
    running(lua, "retries", 1)
    action, expected = MIGRATIONS[event]
    action(lua)
    assert visit(r) is None
    entries = [json.loads(e) for e in r.lrange(HIST, 0, -1)]
    assert [e[1] for e in entries] == expected
    assert entries[0] == [0, "put", {"q": Q}] and entries[1] == [1, "popped", {"worker": "w"}]
    assert whats(lua) == expected


@pytest.mark.parametrize("event", ["put", "log", "move"])
def test_waiting_job_event_writes_implied_put_first(lua: Any, r: redis.Redis, event: str) -> None:
    """An event on a job still waiting in its first visit lists the implied put first."""
    put(lua, now=T0 + 0.5)
    if event == "log":
        lua("log", T0 + 3, "jid", "note")
        expected = [entry(T0, "put", {"q": Q}), entry(T0 + 3, "note")]
    else:
        put(lua, "jid", "q2" if event != "put" else Q, T0 + 3)
        expected = [entry(T0, "put", {"q": Q}),
                    entry(T0 + 3, "put", {"q": "q2" if event != "put" else Q})]
    assert r.lrange(HIST, 0, -1) == expected


def test_unfail_migrates(lua: Any, r: redis.Redis) -> None:
    """A failed job put back by unfail has its whole history in the list."""
    running(lua)
    lua("fail", 5, "jid", "w", "grp", "boom")
    lua("unfail", 6, Q, "grp", 10)
    assert whats(lua) == ["put", "popped", "failed", "put"] and visit(r) is None


def test_cancel_and_retention_delete_everything(lua: Any, r: redis.Redis) -> None:
    """`visit` goes with the hash: cancel and completed-job expiry leave nothing."""
    put(lua, "a")
    lua("cancel", 1, "a")
    lua("config.set", 2, "jobs-history", 0)
    put(lua, "b", Q, 2)
    pop(lua, 3)
    complete(lua, 4, "b")
    assert r.keys("ql:j:*") == []


# -- older stored forms are still read and migrated ---------------------------------------------


@pytest.mark.parametrize("legacy", [
    '[{"q":"queue","put":0}]', '[{"q": "queue", "put": 0}]',
    '[{"q":"queue","put":0,"popped":1,"worker":"w"}]'])
def test_legacy_field_reads_and_migrates(lua: Any, r: redis.Redis, legacy: str) -> None:
    """A legacy single-field `history` (earlier versions, qless-core) reads after the list and
    migrates on the next event (pop writes `[]`, no `visit`)."""
    put(lua)
    r.hset("ql:j:jid", "history", legacy)
    n = len(json.loads(legacy)[0]) // 2
    assert whats(lua) == ["put", "popped"][:n]
    if n == 1:
        pop(lua, 3)
    else:
        lua("log", 3, "jid", "note")
    assert visit(r) is None and r.hget("ql:j:jid", "history") in (None, "[]")
    assert whats(lua) == ["put", "popped"] + (["note"] if n == 2 else [])


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
