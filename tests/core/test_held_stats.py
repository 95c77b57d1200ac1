"""Wait/run statistics held in the engine's memory across calls (docs/engine.md, "Held
statistics"): as a Redis 7 function the engine writes each stats hash out about once a second;
`stats` replies exactly what writing every call's samples at once would give.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from django_qless.core.engine.lua import library_text
from tests.core import keyspace_mode
from tests.core.conftest import Lua
from tests.core.keyspace_mode import CLUSTER, KEYSPACE

__all__: list[str] = []

T = 1700000000.0  # a time in day DAY
DAY = 1699920000
WAIT = f"ql:s:wait:{DAY}:q"
RUN = f"ql:s:run:{DAY}:q"


def held_engine(lua: Lua) -> Lua:
    """Skip unless the engine runs as a function (under EVALSHA nothing is held); make one
    call so this Lua state's first call (which writes through) is behind us."""
    if lua.function is None:
        pytest.skip("samples are held only by the engine as a Redis 7 function")
    lua("pop", 0, "warm-up", "w", 1)
    return lua


def fresh_engine(lua: Lua) -> Lua:
    """`held_engine` with the library loaded again: its new Lua state holds no samples of
    earlier tests' flushed databases (for tests of bounds over all generations)."""
    held_engine(lua)
    lua.conn.function_load(library_text(lua.caller_time), replace=True)
    lua("pop", 0, "warm-up", "w", 1)
    return lua


def script_engine(r: redis.Redis) -> Lua:
    """The engine called by EVALSHA, as on Redis 6.2: every call writes its samples."""
    engine = Lua(r)
    engine.function = None
    return engine


def put(lua: Lua, jid: str, now: float, queue: str = "q") -> None:
    lua("put", now, "w", queue, jid, "klass", "{}", 0)


def pop(lua: Lua, now: float, queue: str = "q", count: int = 1) -> list[str]:
    return [job["jid"] for job in lua.json("pop", now, queue, "w", count)]


def write_out(lua: Lua, now: float) -> None:
    """A call that reads the generation tag (any pop) a second after the oldest held sample."""
    pop(lua, now + 1, "empty")


def stats(lua: Lua, now: float, queue: str = "q") -> dict[str, Any]:
    """`stats` as our client sends it: to the read-only function when the engine is one."""
    if lua.function is None:
        return dict(lua.json("stats", now, queue, now))
    keys = keyspace_mode.keys()
    reply = lua.conn.fcall_ro(f"{lua.function}_ro", len(keys), *keys, "stats", now, queue, now)
    return dict(json.loads(reply))


def test_samples_held_until_a_second_passes(lua: Lua, r: redis.Redis) -> None:
    """Samples taken within a second are not written; a pop a second later writes them all
    out; `stats` counts them all along."""
    held_engine(lua)
    for n in range(3):
        put(lua, f"j{n}", T)
    pop(lua, T + 0.1)
    pop(lua, T + 0.2, count=2)
    lua("complete", T + 0.3, "j0", "w", "q", "{}")
    assert not r.exists(WAIT) and not r.exists(RUN)
    now = stats(lua, T + 0.4)
    assert (now["wait"]["count"], now["run"]["count"]) == (3, 1)
    assert stats(lua, T + 5) == now  # (read-only, though a write-out is due: it merges)
    assert not r.exists(WAIT)
    write_out(lua, T + 0.1)
    assert r.hget(WAIT, "total") == "3" and r.hget(RUN, "total") == "1"
    assert stats(lua, T + 2) == now


def test_script_calls_write_every_sample(r: redis.Redis) -> None:
    """Under EVALSHA nothing survives a call: each call writes its own samples."""
    engine = script_engine(r)
    put(engine, "j", T)
    pop(engine, T + 0.1)
    assert r.hget(WAIT, "total") == "1"


def sequence(lua: Lua, queue: str) -> list[dict[str, Any]]:
    """Jobs put and popped so their spans fall in several buckets, popped one or three at a
    time, completed; the `stats` replies along the way (within and across write-outs)."""
    replies = []
    for n, age in enumerate([0, 0.0003, 2.5, 59.99, 61, 3599.4, 7300, 90000, 900000, 12.25]):
        put(lua, f"{queue}{n}", T - age, queue)
    popped = pop(lua, T, queue)
    replies.append(stats(lua, T, queue))
    popped += pop(lua, T + 0.3, queue, 3)
    lua("complete", T + 0.5, popped[0], "w", queue, "{}")
    replies.append(stats(lua, T + 0.5, queue))
    popped += pop(lua, T + 1.2, queue, 3)  # a second after the first held sample
    for n, jid in enumerate(popped[1:], 1):
        lua("complete", T + 1.2 + n * 0.37, jid, "w", queue, "{}")
        replies.append(stats(lua, T + 1.2 + n * 0.37, queue))
    popped += pop(lua, T + 4, queue, 3)
    replies.append(stats(lua, T + 4, queue))
    return replies


@pytest.mark.skipif(CLUSTER, reason="EVALSHA bundles on a cluster node are another leg")
def test_stats_exact_against_writing_every_call(lua: Lua, r: redis.Redis) -> None:
    """The same jobs in two queues, one through the function (held samples), one by EVALSHA
    (every call writes): the same `stats` replies, text for text, and the same hashes once
    written out."""
    held_engine(lua)
    held = sequence(lua, "a")
    written = sequence(script_engine(r), "b")
    assert [json.dumps(x, sort_keys=True) for x in held] == [
        json.dumps(x, sort_keys=True) for x in written]
    assert held[-1]["wait"]["count"] == 10 and held[-1]["run"]["count"] == 7
    assert r.exists(f"ql:s:wait:{DAY}:a") == 1  # written out on the way (T + 1.2)
    write_out(lua, T + 4)
    for kind in ("wait", "run"):
        assert r.hgetall(f"ql:s:{kind}:{DAY}:a") == r.hgetall(f"ql:s:{kind}:{DAY}:b")


def test_flush_drops_held_samples(lua: Lua, r: redis.Redis) -> None:
    """A FLUSHALL ends the held samples: later calls never write them into the new data."""
    held_engine(lua)
    put(lua, "old", T)
    pop(lua, T + 0.1)
    r.flushall()
    write_out(lua, T + 0.1)
    assert not r.exists(WAIT)
    assert stats(lua, T + 2)["wait"]["count"] == 0
    put(lua, "new", T + 2)
    pop(lua, T + 2.5)
    write_out(lua, T + 2.5)
    assert r.hget(WAIT, "total") == "1"


def test_deleted_config_drops_held_samples(lua: Lua, r: redis.Redis) -> None:
    """A deleted ql:config (the generation tag gone) ends the held samples too."""
    held_engine(lua)
    put(lua, "a", T)
    put(lua, "b", T)
    pop(lua, T + 0.1)
    write_out(lua, T + 0.1)
    pop(lua, T + 1.5)
    r.delete("ql:config")
    write_out(lua, T + 1.5)
    assert r.hget(WAIT, "total") == "1"
    assert stats(lua, T + 3)["wait"]["count"] == 1


@pytest.mark.skipif(KEYSPACE is not None, reason="two databases of the default keyspace")
def test_each_database_keeps_its_own(lua: Lua, r: redis.Redis) -> None:
    """One Lua state serves every database: samples held in database 1 are counted and
    written out only there."""
    held_engine(lua)
    kwargs = r.connection_pool.connection_kwargs
    other_conn = redis.Redis(unix_socket_path=kwargs["path"], db=1, decode_responses=True)
    try:
        other = Lua(other_conn)
        for n in range(3):
            put(lua, f"j{n}", T)
            put(other, f"k{n}", T)
        pop(lua, T + 0.1)
        pop(other, T + 0.1, count=3)
        assert (stats(lua, T + 0.5)["wait"]["count"], stats(other, T + 0.5)["wait"]["count"]) \
            == (1, 3)
        write_out(lua, T + 0.1)
        assert r.hget(WAIT, "total") == "1" and not other_conn.exists(WAIT)
        assert stats(other, T + 2)["wait"]["count"] == 3
        write_out(other, T + 0.1)
        assert other_conn.hget(WAIT, "total") == "3" and r.hget(WAIT, "total") == "1"
    finally:
        other_conn.flushdb()
        other_conn.close()


@pytest.mark.skipif(KEYSPACE is not None, reason="calls two keyspaces by their own keys")
def test_a_call_writes_out_only_its_keyspace(lua: Lua, r: redis.Redis) -> None:
    """A shard keyspace's call writes out its own held samples, never the default's (on a
    cluster node it could not: another slot)."""
    held_engine(lua)
    name = lua.function

    def call(prefix: list[str], *argv: Any) -> Any:
        return r.fcall(name, len(prefix), *prefix, *argv)

    shard = ["ql:{s}:"]
    for keys in ([], shard):
        call(keys, "put", T, "w", "q", "j", "klass", "{}", 0)
        call(keys, "pop", T + 0.1, "q", "w", 1)
    call(shard, "pop", T + 1.1, "empty", "w", 1)
    assert r.hget(f"ql:{{s}}:s:wait:{DAY}:q", "total") == "1"
    assert not r.exists(WAIT)
    call([], "pop", T + 1.1, "empty", "w", 1)
    assert r.hget(WAIT, "total") == "1"


@pytest.mark.skipif(KEYSPACE is not None, reason="calls many keyspaces by their own keys")
def test_eighty_shard_keyspaces_each_keep_their_samples(lua: Lua, r: redis.Redis) -> None:
    """One server (a cluster primary) may hold far more than 64 shards: every shard's held
    samples wait for its own next call, however many others hold samples meanwhile."""
    held_engine(lua)
    name = lua.function
    tags = [f"k{n}" for n in range(80)]

    def call(tag: str, *argv: Any) -> Any:
        return r.fcall(name, 1, f"ql:{{{tag}}}:", *argv)

    for tag in tags:
        call(tag, "put", T, "w", "q", "j", "klass", "{}", 0)
        call(tag, "pop", T + 0.1, "q", "w", 1)
    assert not any(r.exists(f"ql:{{{tag}}}:s:wait:{DAY}:q") for tag in tags)
    for tag in tags:
        call(tag, "pop", T + 1.1, "empty", "w", 1)
    assert [r.hget(f"ql:{{{tag}}}:s:wait:{DAY}:q", "total") for tag in tags] == ["1"] * 80


def test_past_256_hashes_all_are_written_out(lua: Lua, r: redis.Redis) -> None:
    """At most 256 hashes are held per keyspace: the sample of a 257th writes out every held
    one (within a second: only the bound does)."""
    held_engine(lua)
    for n in range(129):
        put(lua, "j", T, f"q{n}")  # (popped and completed: put again in the next queue)
        pop(lua, T + n / 1000, f"q{n}")
        lua("complete", T + n / 1000, "j", "w", f"q{n}", "{}")
        if n == 127:  # a wait and a run hash per queue: 256 held
            assert not any(r.exists(f"ql:s:wait:{DAY}:q{i}") for i in range(n + 1))
    assert all(r.exists(f"ql:s:wait:{DAY}:q{i}") for i in range(129))
    assert all(r.exists(f"ql:s:run:{DAY}:q{i}") for i in range(128))
    assert not r.exists(f"ql:s:run:{DAY}:q128")  # (held again, after the write-out)


@pytest.mark.skipif(CLUSTER, reason="command statistics of one private server")
def test_held_samples_save_two_commands_a_sample(lua: Lua, r: redis.Redis) -> None:
    """40 jobs popped and completed within a second cost 160 fewer HMGET + HSET than the
    same jobs a second apart (each call then writes its samples out, as EVALSHA does)."""
    held_engine(lua)

    def stats_commands(queue: str, step: float) -> int:
        for n in range(40):
            put(lua, f"{queue}{n}", T, queue)
        r.config_resetstat()
        for n in range(40):
            at = T + 10 + n * step
            jid = pop(lua, at, queue)[0]
            lua("complete", at, jid, "w", queue, "{}")
        info = r.info("commandstats")
        return sum(int(info.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("hmget", "hset"))

    apart = stats_commands("a", 1.0)
    close = stats_commands("b", 0.01)
    assert close <= apart - 150, (close, apart)


def test_past_8192_samples_all_are_written_out(lua: Lua, r: redis.Redis) -> None:
    """At most 8,192 samples are held per keyspace: the 8,193rd writes them all out."""
    held_engine(lua)
    for start in range(0, 8193, 1000):
        args: list[Any] = []
        for n in range(start, min(start + 1000, 8193)):
            args += [f"j{n}", "klass", "{}", 0, 0]
        lua("put.many", T, "w", "q", len(args) // 5, *args)
    for _ in range(8):
        pop(lua, T + 0.1, count=1000)
    pop(lua, T + 0.2, count=192)
    assert not r.exists(WAIT)
    assert stats(lua, T + 0.3)["wait"]["count"] == 8192
    pop(lua, T + 0.3)
    assert r.hget(WAIT, "total") == "8193"


@pytest.mark.skipif(KEYSPACE is not None, reason="calls many keyspaces by their own keys")
def test_past_65536_samples_held_in_all_a_call_writes_its_own_out(
        lua: Lua, r: redis.Redis) -> None:
    """All generations together hold at most 65,536 samples: 8 shards holding 8,192 each
    keep them, and a 9th shard's sample is written out by its own call."""
    fresh_engine(lua)
    name = lua.function

    def call(tag: str, *argv: Any) -> Any:
        return r.fcall(name, 1, f"ql:{{{tag}}}:", *argv)

    def held(tag: str, jobs: int) -> None:
        for start in range(0, jobs, 1000):
            args: list[Any] = []
            for n in range(start, min(start + 1000, jobs)):
                args += [f"j{n}", "klass", "{}", 0, 0]
            call(tag, "put.many", T, "w", "q", len(args) // 5, *args)
            call(tag, "pop", T + 0.1, "q", "w", min(1000, jobs - start))

    for n in range(8):
        held(f"k{n}", 8192)
    held("k8", 1)
    assert r.hget(f"ql:{{k8}}:s:wait:{DAY}:q", "total") == "1"
    assert not any(r.exists(f"ql:{{k{n}}}:s:wait:{DAY}:q") for n in range(8))


@pytest.mark.skipif(KEYSPACE is not None, reason="two databases of the default keyspace")
def test_past_1024_generations_the_least_recently_used_is_dropped(
        lua: Lua, r: redis.Redis) -> None:
    """Held samples of at most 1024 generations are kept: one that no call named while 1024
    newer ones (here: flushed databases) held samples is dropped unwritten."""
    fresh_engine(lua)
    kwargs = r.connection_pool.connection_kwargs
    other_conn = redis.Redis(unix_socket_path=kwargs["path"], db=1, decode_responses=True)
    try:
        other = Lua(other_conn)
        put(other, "k", T)
        pop(other, T + 0.1)
        for n in range(1023):
            put(lua, f"j{n}", T)
            pop(lua, T + 0.1)
            r.flushdb()
        assert stats(other, T + 0.2)["wait"]["count"] == 1  # 1024 generations held
        put(lua, "j", T)
        pop(lua, T + 0.1)  # the 1025th
        assert stats(other, T + 0.2)["wait"]["count"] == 0
        write_out(other, T + 0.1)
        assert not other_conn.exists(WAIT)
    finally:
        other_conn.flushdb()
        other_conn.close()
