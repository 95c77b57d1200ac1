"""The engine's put options a copy between shards carries: `history` and `remaining`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from tests.core.conftest import snapshot

__all__: list[str] = []

# A job's history as job objects show it: put, popped, a log entry with detail, failed.
HISTORY = [
    {"when": 10, "what": "put", "q": "src"},
    {"when": 11, "what": "popped", "worker": "w0"},
    {"when": 12, "what": "checked", "step": 2, "ok": True},
    {"when": 13, "what": "failed", "group": "boom", "worker": "w0"},
]


def put(lua: Any, jid: str, *opts: Any, now: float = 100, queue: str = "queue") -> Any:
    """Put one job with trailing options."""
    return lua("put", now, "", queue, jid, "klass", {"n": 1}, 0, *opts)


def job(lua: Any, jid: str) -> dict[str, Any]:
    """Return the job object `get` replies."""
    found: dict[str, Any] = lua.json("get", 0, jid)
    return found


def test_a_copy_keeps_its_history_then_gets_its_put(lua: Any, r: redis.Redis) -> None:
    put(lua, "a", "retries", 4, "if-absent", "live", "history", json.dumps(HISTORY),
        "remaining", 2, now=100.5)
    got = job(lua, "a")
    assert got["history"] == [*HISTORY, {"when": 100, "what": "put", "q": "queue"}]
    assert (got["retries"], got["remaining"], got["state"]) == (4, 2, "waiting")
    assert r.hget("ql:j:a", "remaining") == "2"
    # The list goes on as any job's: the pop and the completion are appended.
    lua("pop", 101, "queue", "w1", 1)
    lua("complete", 102, "a", "w1", "queue", {})
    assert [e["what"] for e in job(lua, "a")["history"]] == [
        "put", "popped", "checked", "failed", "put", "popped", "done"]
    assert r.hget("ql:j:a", "visit") is None


def test_retries_left_are_what_a_retry_counts_down(lua: Any) -> None:
    put(lua, "a", "retries", 3, "if-absent", "any", "remaining", 1)
    lua("pop", 101, "queue", "w1", 1)
    assert lua("retry", 102, "a", "queue", "w1", 0) == 0
    lua("pop", 103, "queue", "w1", 1)
    assert lua("retry", 104, "a", "queue", "w1", 0) == -1
    assert job(lua, "a")["state"] == "failed"


def test_remaining_equal_to_retries_and_no_history_change_nothing(lua: Any,
                                                                  r: redis.Redis) -> None:
    put(lua, "plain", now=100)
    put(lua, "a", "if-absent", "any", "remaining", 5, now=100)
    assert job(lua, "a")["remaining"] == 5
    plain, copy = r.hgetall("ql:j:plain"), r.hgetall("ql:j:a")
    assert {k: v for k, v in copy.items() if k != "jid"} == {
        k: v for k, v in plain.items() if k != "jid"}
    assert not r.exists("ql:j:a-history")


def test_throttles_ride_along(lua: Any) -> None:
    put(lua, "a", "throttles", '["api"]', "if-absent", "any", "history",
        json.dumps(HISTORY[:2]), "remaining", 3)
    got = job(lua, "a")
    assert got["throttles"] == ["api"] and got["remaining"] == 3
    assert [e["what"] for e in got["history"]] == ["put", "popped", "put"]


def test_an_empty_history_leaves_only_the_put(lua: Any) -> None:
    put(lua, "a", "if-absent", "any", "history", "[]", now=100)
    assert job(lua, "a")["history"] == [{"when": 100, "what": "put", "q": "queue"}]


def test_a_replaced_record_loses_its_own_history(lua: Any, r: redis.Redis) -> None:
    """`if-absent live` over a complete job: the carried history replaces the old one."""
    put(lua, "a", now=1, queue="old")
    lua("pop", 2, "old", "w1", 1)
    lua("complete", 3, "a", "w1", "old", {})
    assert r.hget("ql:j:a", "visit") is not None  # (the compact first visit)
    put(lua, "a", "if-absent", "live", "history", json.dumps(HISTORY), "remaining", 0,
        now=100)
    got = job(lua, "a")
    assert got["history"] == [*HISTORY, {"when": 100, "what": "put", "q": "queue"}]
    assert got["remaining"] == 0 and got["state"] == "waiting"
    assert r.hget("ql:j:a", "visit") is None


def test_a_replaced_record_without_history_keeps_the_usual_entries(lua: Any) -> None:
    put(lua, "a", now=1, queue="old")
    lua("pop", 2, "old", "w1", 1)
    lua("complete", 3, "a", "w1", "old", {})
    put(lua, "a", "if-absent", "live", "remaining", 1, now=100)
    got = job(lua, "a")
    assert [e["what"] for e in got["history"]] == ["put", "popped", "done", "put"]
    assert got["remaining"] == 1


def test_a_long_history_is_capped_as_any(lua: Any) -> None:
    lua("config.set", 0, "max-job-history", 5)
    history = [{"when": i, "what": f"e{i}"} for i in range(10)]
    put(lua, "a", "if-absent", "any", "history", json.dumps(history), now=100)
    assert [e["what"] for e in job(lua, "a")["history"]] == ["e0", "e7", "e8", "e9", "put"]


def test_put_many_carries_them_per_job(lua: Any) -> None:
    lua("put.many", 100, "", "queue", 2,
        "a", "K", "{}", 0, 2, "if-absent", "any", "history", json.dumps(HISTORY[:1]),
        "b", "K", "{}", 0, 2, "if-absent", "any", "remaining", 3)
    assert [e["what"] for e in job(lua, "a")["history"]] == ["put", "put"]
    assert job(lua, "a")["remaining"] == 5
    assert job(lua, "b")["remaining"] == 3
    assert job(lua, "b")["history"] == [{"when": 100, "what": "put", "q": "queue"}]


BAD = [
    (("history", "[]"), r'Arg "history" needs if-absent'),
    (("remaining", "1"), r'Arg "remaining" needs if-absent'),
    (("if-absent", "any", "history", "{}"), r'Arg "history" must be a JSON array: \{\}'),
    (("if-absent", "any", "history", "[1"), r'Arg "history" must be a JSON array'),
    (("if-absent", "any", "history", "[1, 2]"), r'Arg "history" entry 1 must be an object'),
    (("if-absent", "any", "history", '[{"when": 1, "what": "put"}, {"when": 2}]'),
     r'Arg "history" entry 2 must be an object with a string "what"'),
    (("if-absent", "any", "history", '[{"when": "1", "what": "put"}]'),
     r'entry 1 must be an object with a string "what" and a numeric "when"'),
    (("if-absent", "any", "history", '[{"when": 1, "what": ""}]'), r"entry 1 must be"),
    (("if-absent", "any", "history", '[{"when": 1, "what": 7}]'), r"entry 1 must be"),
    (("if-absent", "any", "remaining", "-1"), r'Arg "remaining"'),
    (("if-absent", "any", "remaining", "1.5"), r'Arg "remaining"'),
    (("if-absent", "any", "retries", "2", "remaining", "3"), r'Arg "remaining"'),
    (("if-absent", "any", "remaining", "x"), r'Arg "remaining"'),
]


@pytest.mark.parametrize(("opts", "error"), BAD)
def test_an_invalid_value_is_refused_before_any_write(lua: Any, r: redis.Redis,
                                                      opts: tuple[str, ...],
                                                      error: str) -> None:
    put(lua, "other", now=1)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=error):
        put(lua, "a", *opts)
    assert snapshot(r) == before


def test_an_invalid_value_in_put_many_writes_no_job(lua: Any, r: redis.Redis) -> None:
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r'job 2: Arg "remaining"'):
        lua("put.many", 100, "", "queue", 2,
            "a", "K", "{}", 0, 2, "if-absent", "any", "history", json.dumps(HISTORY),
            "b", "K", "{}", 0, 2, "if-absent", "any", "remaining", 6)
    assert snapshot(r) == before
