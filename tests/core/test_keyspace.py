"""Shard keyspaces: every key and channel of a call carries its prefix; nothing leaks."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.engine.invoke import DEFAULT, Keyspace
from django_qless.core.exceptions import InvalidArgument
from tests.core.conftest import Lua
from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []


def raw(redis_url: str) -> redis.Redis:
    """A connection returning bytes (for DUMP)."""
    return redis.Redis.from_url(redis_url)


def dumps(conn: redis.Redis, prefix: str) -> dict[bytes, Any]:
    """DUMP of every key of one keyspace (the default keyspace: keys without a tag)."""
    out = {}
    for key in conn.scan_iter(count=1000):
        in_shard = key.startswith(b"ql:{")
        mine = key.startswith(prefix.encode()) if prefix != "ql:" else not in_shard
        if mine:
            out[key] = conn.dump(key)
    return out


def workload(c: Client, round_: int) -> None:
    """One round of most engine paths, with the same names in every keyspace."""
    q = c.queues["q"]
    c.config["heartbeat"] = 30 + round_
    c.throttles["t"].set(2)
    q.put("K", {"r": round_}, jid=f"a{round_}", tags=["x"], throttles=["t"])
    q.put("K", {}, jid=f"b{round_}", depends=[f"a{round_}"])
    q.put("K", {}, jid=f"c{round_}", delay=100)
    q.recur("K", {}, 60, jid=f"rec{round_}")
    c.track(f"a{round_}")
    jobs, _ = c.reserve(["q"], 2, worker="w1")
    for job in jobs:
        if job.jid == f"a{round_}":
            c.complete_and_reserve(job, ["q"], 0)
        else:
            job.fail("g", "boom")
    c.reserve(["q"], 1, worker="w1", wait=5)  # idle registration
    c.call("pause", "q2")
    c.reap()


@pytest.fixture
def three(redis_url: str) -> Iterator[dict[str | None, Client]]:
    clients = {tag: Client(redis_url, worker_name="w1", keyspace=tag) for tag in ("a", "b", None)}
    yield clients
    for c in clients.values():
        c.close()


def test_interleaved_keyspaces_never_touch_each_other(
    redis_url: str, three: dict[str | None, Client]
) -> None:
    """Calls on one keyspace write only its keys, however they interleave on one server
    (the function library's name caches are per keyspace)."""
    conn = raw(redis_url)
    prefixes = {tag: Keyspace(tag).prefix for tag in three}
    for round_ in range(3):
        for tag, client in three.items():
            others = {t: dumps(conn, p) for t, p in prefixes.items() if t != tag}
            workload(client, round_)
            for t, before in others.items():
                assert dumps(conn, prefixes[t]) == before, (tag, t)
    # Same names everywhere: each keyspace holds exactly the other's layout (but for the
    # statistics hashes: held samples are written out when due, so whether one exists yet
    # depends on timing and on which call was the engine's first).
    names = {
        tag: {k.decode()[len(p):] for k in dumps(conn, p) if not k[len(p):].startswith(b"s:")}
        for tag, p in prefixes.items()
    }
    assert names["a"] and names["a"] == names["b"] == names[None]
    assert all(k.startswith((b"ql:{a}:", b"ql:{b}:", b"ql:")) for k in conn.scan_iter())
    conn.close()


def test_every_command_of_a_shard_call_names_only_its_keyspace(
    redis_url: str, three: dict[str | None, Client]
) -> None:
    """MONITOR: every key and channel the engine touches on a shard carries its prefix."""
    conn = raw(redis_url)
    workload(three[None], 0)
    workload(three["a"], 0)
    with conn.monitor() as mon:
        workload(three["b"], 1)
        workload(three["b"], 2)
        three["b"].call("queues")
        seen = 0
        while mon.connection.can_read(timeout=0.2):
            line = mon.connection.read_response()
            if b"[0 lua]" not in line:
                continue
            args = re.findall(rb'"((?:[^"\\]|\\.)*)"', line)
            seen += 1
            for arg in args[1:]:
                if arg.startswith(b"ql:") and not arg.startswith(b"ql:q:"):  # (throttle ids)
                    assert arg.startswith(b"ql:{b}:"), line
        assert seen > 50
    conn.close()


def test_shard_channels(redis_url: str, three: dict[str | None, Client]) -> None:
    """Events of a shard arrive on its channels (sharded ones on Redis 7+)."""
    b = three["b"]
    got: list[dict[str, Any]] = []
    with b.events() as events:
        events.on("*", got.append)
        b.queues["q"].put("K", {}, jid="j")
        for _ in range(100):
            if got:
                break
            time.sleep(0.01)
    assert got and got[0]["channel"] == "ql:{b}:log" and got[0]["event"] == "put"


def test_keyspace_names() -> None:
    """Build names by the prefix rule; refuse a bad tag."""
    ks = Keyspace("s3")
    assert ks.prefix == "ql:{s3}:" and ks.engine_keys == ("ql:{s3}:",)
    assert ks.key("j:x") == "ql:{s3}:j:x" and ks.channel("wake:q") == "ql:{s3}:wake:q"
    assert ks.name("ql:{s3}:q:q-work") == "q:q-work"
    assert ks.pattern("j:*") == "ql:\\{s3\\}:j:*"
    assert DEFAULT.prefix == "ql:" and DEFAULT.engine_keys == () and not DEFAULT.sharded
    assert ks.uses_sharded_pubsub(7) and not ks.uses_sharded_pubsub(6)
    assert not DEFAULT.uses_sharded_pubsub(7)
    for bad in ("", "a b", "a" * 33, "{x}", "é"):
        with pytest.raises(InvalidArgument):
            Keyspace(bad)


def test_shard_call_passes_the_prefix(redis_url: str) -> None:
    """The engine builds the shard's keys from KEYS[1] (EVALSHA and FCALL alike)."""
    for mode in ("script", "auto"):
        c = Client(redis_url, keyspace="s9", engine=mode)
        c.queues["q"].put("K", {}, jid=f"j{mode}")
        assert c.redis.exists(f"ql:{{s9}}:j:j{mode}")
        assert not c.redis.exists(f"ql:j:j{mode}")
        c.close()


@pytest.mark.skipif(KEYSPACE is not None, reason="calls many keyspaces by their own keys")
def test_eighty_keyspaces_alternating_keep_their_memos(r: redis.Redis) -> None:
    """One server (a cluster primary) may hold far more than 64 shards: calls alternating over
    80 keyspaces keep each keyspace's memos, so a second put into a queue listed a moment ago
    skips its `ZADD ql:queues` in every keyspace (one ZADD a put: its work set)."""
    engine = Lua(r)
    if engine.function is None:
        pytest.skip("memos live across calls only in the engine as a Redis 7 function")
    tags = [f"k{n}" for n in range(80)]

    def put(tag: str, jid: str, now: float) -> None:
        r.fcall(engine.function, 1, f"ql:{{{tag}}}:", "put", now, "w", "q", jid, "K", "{}", 0)

    for tag in tags:
        put(tag, "a", 1700000000.0)
    r.config_resetstat()
    for tag in tags:
        put(tag, "b", 1700000000.1)
    assert int(r.info("commandstats")["cmdstat_zadd"]["calls"]) == 80
