"""What one put costs Redis: the commands it runs, and what it remembers across calls.

A put of a new job into a queue it already listed, with no idle worker, runs six commands
(seven with the server's `TIME`, which the caller-time engine of these tests skips); replies,
stored fields and events are those of a put that runs them all (docs/engine.md, "What a put
costs").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_qless.core.queue import Queue
from tests.core.conftest import Lua
from tests.core.handoff_listener import Listener
from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

Q = "q"


def put(lua: Any, jid: str, now: float, queue: str = Q) -> Any:
    return lua("put", now, "w", queue, jid, "klass", '{"a": 1}', 0)


def commands(r: redis.Redis) -> dict[str, int]:
    """Redis commands run since the last reset, by name (the engine call itself left out)."""
    out = {}
    for name, row in r.info("commandstats").items():
        cmd = name.removeprefix("cmdstat_")
        if cmd not in ("fcall", "evalsha", "config|resetstat", "info") and row["calls"]:
            out[cmd] = row["calls"]
    return out


def needs_memory(lua: Any) -> None:
    """Skip unless the engine is a Redis 7 function: under EVALSHA a memo lasts one call."""
    if lua.function is None:
        pytest.skip("under EVALSHA the engine remembers nothing across calls")


def published(cmds: dict[str, int]) -> int:
    return cmds.get("publish", 0) + cmds.get("spublish", 0)


def test_a_put_into_a_listed_queue_runs_six_commands(lua: Any, r: redis.Redis) -> None:
    """The first put of a generation lists the queue and looks for idle workers; the next
    ones, within a second, do neither: EXISTS, one config HMGET, ZADD, HSET, two PUBLISHes."""
    needs_memory(lua)
    put(lua, "a", 100)
    assert r.zscore("ql:queues", Q) == 100
    r.config_resetstat()
    put(lua, "b", 100.5)
    cmds = commands(r)
    assert (cmds.pop("exists"), cmds.pop("hmget"), cmds.pop("zadd"), cmds.pop("hset")) \
        == (1, 1, 1, 1)
    assert published(cmds) == 2 and set(cmds) <= {"publish", "spublish"}
    assert lua.json("peek", 101, Q, 5)[1]["jid"] == "b"


def test_a_put_a_second_later_lists_the_queue_again(lua: Any, r: redis.Redis) -> None:
    """The memo of listed queues lasts a second: a queue another writer unlisted comes back."""
    needs_memory(lua)
    put(lua, "a", 100)
    r.zrem("ql:queues", Q)
    put(lua, "b", 100.5)
    assert r.zscore("ql:queues", Q) is None  # (within the second: not asked again)
    put(lua, "c", 101.1)
    assert r.zscore("ql:queues", Q) == 101.1


def test_a_forgotten_queue_is_listed_by_the_next_put(lua: Any, r: redis.Redis) -> None:
    put(lua, "a", 100)
    lua("queue.forget", 100.1, Q)
    assert r.zscore("ql:queues", Q) is None
    put(lua, "b", 100.2)
    assert r.zscore("ql:queues", Q) == 100.2


def test_a_flushed_keyspace_is_listed_again_at_once(lua: Any, r: redis.Redis) -> None:
    """The memo is tied to the generation tag `#marks`: a flush deletes it, and the next put
    lists its queue and writes a new tag."""
    put(lua, "a", 100)
    tag = r.hget("ql:config", "#marks")
    assert tag
    r.flushdb()
    put(lua, "b", 100.2)
    assert r.zscore("ql:queues", Q) == 100.2
    assert r.hget("ql:config", "#marks") not in (None, tag)
    assert json.loads(lua("config.get", 100.3)).get("#marks") is None  # (still hidden)


def test_a_moved_job_and_a_new_one_store_what_they_did(lua: Any, r: redis.Redis) -> None:
    """The memo changes no stored field: a new job's hash, a moved job's queue listing."""
    put(lua, "a", 100)
    put(lua, "b", 100.5)
    full = {"jid": "b", "priority": "0", "tags": "{}", "remaining": "5"}
    assert r.hgetall("ql:j:b") == {
        "klass": "klass", "data": '{"a": 1}', "state": "waiting", "queue": Q, "retries": "5",
        "time": "100.5", **(full if KEYSPACE is None else {}),  # (lean records in a shard)
    }
    put(lua, "b", 100.6, queue="other")
    assert r.zscore("ql:queues", "other") == 100.6
    assert r.hget("ql:j:b", "queue") == "other"


def test_a_worker_registered_since_the_last_put_is_handed_the_next(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener]
) -> None:
    """A put remembers that a queue had no idle worker; a registration ends that at once."""
    worker = listen("w2")
    put(lua, "a", 100)  # no idle worker: remembered for a second
    lua("pop", 100.1, Q, "w1", 1)
    assert lua.json("reserve.wait", 100.2, "w2", 10, 1, Q)["jobs"] == []
    r.config_resetstat()
    put(lua, "b", 100.3)
    assert commands(r).get("zrangebyscore") == 1  # (the registration dropped the memo)
    assert [job["jid"] for job in worker.jobs()] == ["b"]
    assert r.hget("ql:j:b", "worker") == "w2"


def test_a_put_with_no_idle_worker_skips_the_lookup_within_a_second(
    lua: Any, r: redis.Redis
) -> None:
    needs_memory(lua)
    put(lua, "a", 100)
    r.config_resetstat()
    put(lua, "b", 100.9)
    assert "zrangebyscore" not in commands(r)
    put(lua, "c", 101.0)  # a second later: looked up again
    assert commands(r).get("zrangebyscore") == 1


def test_a_default_put_sends_no_options_and_stores_the_same_job(
    q: Queue, r: redis.Redis
) -> None:
    """Queue.put with a fresh jid and default options sends none (the engine's defaults are
    the same): the record equals that of a put sending every default."""
    with r.monitor() as m:
        fresh = q.put("k", {"x": 1})
        for event in m.listen():
            if event["command"].startswith(("FCALL", "EVALSHA")):
                sent = event["command"]
                break
    argv = sent.split()
    assert argv[argv.index("put") + 2:] == [q.client.worker_name, q.name, fresh, "k", '{"x":1}',
                                            "0"]
    assert "priority" not in sent and "retries" not in sent
    given = q.put("k", {"x": 1}, jid="given")
    stored = {j: {k: v for k, v in r.hgetall(f"ql:j:{j}").items() if k not in ("jid", "time")}
              for j in (fresh, given)}
    assert stored[fresh] == stored[given] and stored[fresh]["retries"] == "5"
    a, b = q.client.jobs[fresh], q.client.jobs[given]
    assert a is not None and b is not None
    assert (a.priority, list(a.tags), a.retries, list(a.dependencies)) == (0, [], 5, [])
    assert (a.priority, a.tags, a.retries, a.dependencies) \
        == (b.priority, b.tags, b.retries, b.dependencies)


def test_the_time_field_drops_trailing_zeros(lua: Any, r: redis.Redis) -> None:
    """`time` is `now` to the millisecond, trailing zeros dropped (formatted without gsub)."""
    for now, text in ((1700000000.3, "1700000000.3"), (1700000001.03, "1700000001.03"),
                      (1700000002.003, "1700000002.003"), (1700000003.12, "1700000003.12"),
                      (1700000004.0004, "1700000004"), (1700000005.9996, "1700000005.999"),
                      (1700000006.1006, "1700000006.101"), (1700000007.0996, "1700000007.1"),
                      (1700000008.0096, "1700000008.01"), (1700000009.999, "1700000009.999")):
        jid = f"t{int(now) % 10}"
        put(lua, jid, now)
        assert r.hget(f"ql:j:{jid}", "time") == text


def test_puts_without_options_share_nothing_with_puts_that_have_them(
    lua: Any, r: redis.Redis
) -> None:
    """A put without options reads shared empty option and tag tables (no table a put): a
    put with tags, and a moved job's tags, never leak into the next put without any."""
    put(lua, "a", 100)
    lua("put", 100.1, "w", Q, "b", "klass", "{}", 0, "tags", '["x"]', "priority", 3)
    put(lua, "c", 100.2)
    lua("put", 100.3, "w", "other", "b", "klass", "{}", 0)  # moved: keeps its tags
    put(lua, "d", 100.4)
    for jid in ("a", "c", "d"):
        job = lua.json("get", 101, jid)
        assert (job["tags"], job["priority"]) == ({}, 0), jid
    moved = lua.json("get", 101, "b")
    assert (moved["tags"], moved["priority"], moved["queue"]) == (["x"], 3, "other")
    assert r.zrange("ql:t:x", 0, -1) == ["b"]


def test_a_put_after_a_moved_job_with_throttles_and_dependencies_gets_none(
    lua: Any, r: redis.Redis
) -> None:
    """A single put's checked arguments live in one table every put refills: what a move
    with throttles and dependencies left there never reaches the next new job."""
    put(lua, "a", 100)
    put(lua, "b", 100.1)
    lua("put", 100.2, "w", "other", "b", "klass", "{}", 0, "throttles", '["t1"]',
        "depends", '["a"]')
    put(lua, "c", 100.3)
    moved, new = lua.json("get", 101, "b"), lua.json("get", 101, "c")
    assert (moved["state"], moved["throttles"], moved["dependencies"]) \
        == ("depends", ["t1"], ["a"])
    assert (new["state"], new["queue"], new.get("throttles"), new["dependencies"]) \
        == ("waiting", Q, None, {})  # (no throttles: no field; cjson writes [] as {})
    assert sorted(r.zrange(f"ql:q:{Q}-work", 0, -1)) == ["a", "c"]


def test_a_put_keeps_a_now_within_a_second_of_the_server_and_replaces_one_further(
    r: redis.Redis,
) -> None:
    """The shipped engine reads TIME's microseconds only for a `now` outside the server's
    current second: a `now` within a second of the server's time is kept either way, and
    one further away is replaced by the server's."""
    shipped = Lua(r, caller_time=False)

    def server_now() -> float:
        seconds, micros = r.time()
        return int(seconds) + int(micros) / 1e6

    for i, offset in enumerate((-0.9, -0.4, 0.4, 0.9, -1.5, 1.5, -30.0, 30.0)):
        sent = server_now() + offset
        shipped("put", sent, "w", Q, f"c{i}", "klass", "{}", 0)
        after = server_now()
        stored = float(r.hget(f"ql:j:c{i}", "time") or 0)
        # (`time` is `now` rounded to the millisecond, but never up into the next second:
        # a `now` in the last half millisecond of a second is stored up to 1 ms below it)
        if abs(offset) < 1:
            assert stored == pytest.approx(sent, abs=1e-3), offset
        else:
            assert after - 0.5 <= stored <= after + 1e-3, offset
