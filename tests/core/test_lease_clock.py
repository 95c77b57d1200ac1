"""Leases are judged by the Redis server's clock, whatever `now` a caller sends.

These tests call the engine as shipped (not the testing variant that takes `now` as given),
the way a stock qless client whose local clock is off would.
"""

from __future__ import annotations

import pytest
import redis

from django_qless.core.client import Client
from tests.core.conftest import Lua
from testservers.redis_server import RedisServer

__all__: list[str] = []


@pytest.fixture
def shipped(r: redis.Redis) -> Lua:
    """The engine as shipped: `now` bounded by the server's clock."""
    return Lua(r, caller_time=False)


def server_now(r: redis.Redis) -> float:
    seconds, micros = r.time()
    return int(seconds) + int(micros) / 1e6


def held_job(shipped: Lua, r: redis.Redis) -> float:
    """Put and pop `jid` for `honest` at the server's time (heartbeat 30, no grace)."""
    shipped("config.set", server_now(r), "heartbeat", 30)
    shipped("config.set", server_now(r), "grace-period", 0)
    shipped("put", server_now(r), "honest", "q", "jid", "klass", {}, 0)
    t = server_now(r)
    assert shipped.json("pop", t, "q", "honest", 1)[0]["jid"] == "jid"
    return t


def test_a_fast_caller_cannot_take_a_valid_lease(shipped: Lua, r: redis.Redis) -> None:
    """A pop, reserve or reap 60 s ahead finds the lease still valid and leaves it alone."""
    held_job(shipped, r)
    ahead = server_now(r) + 60
    assert shipped.json("pop", ahead, "q", "fast", 1) == {}
    assert not shipped.json("reserve", ahead, "fast", 1, "q")["jobs"]
    assert shipped.json("reap", ahead) == []
    assert r.hget("ql:j:jid", "worker") == "honest"
    assert r.hget("ql:j:jid", "grace") is None  # no courtesy notice either
    assert shipped("heartbeat", server_now(r), "jid", "honest") is not None


def test_a_slow_caller_cannot_write_expiries_in_the_past(shipped: Lua, r: redis.Redis) -> None:
    """A pop and a heartbeat sent 60 s behind set expiries from the server's clock."""
    shipped("config.set", server_now(r), "heartbeat", 30)
    shipped("put", server_now(r), "slow", "q", "jid", "klass", {}, 0)
    before = server_now(r)
    job = shipped.json("pop", before - 60, "q", "slow", 1)[0]
    assert job["expires"] >= before + 30 - 0.125  # (a lease ends on a 1/8 s, rounded down)
    assert shipped.json("pop", server_now(r), "q", "other", 1) == {}
    expiry = float(shipped("heartbeat", server_now(r) - 60, "jid", "slow"))
    assert expiry >= int(before) + 30  # (the reply is a whole number of seconds)
    assert float(r.zscore("ql:q:q-locks", "jid") or 0) >= before + 30 - 0.125
    assert shipped.json("get", server_now(r), "jid")["history"][-1]["when"] >= int(before)


def test_a_caller_within_a_second_keeps_its_time(shipped: Lua, r: redis.Redis) -> None:
    """Our client's own staggering (microseconds) and small offsets are kept as sent."""
    t = server_now(r) + 0.5
    shipped("put", t, "w", "q", "jid", "klass", {}, 0)
    # (the `time` field is written truncated to the millisecond: docs/compatibility.md)
    stored = float(r.hget("ql:j:jid", "time") or 0)
    assert stored == pytest.approx(t, abs=5e-4)


def test_writes_after_reading_the_clock_work_without_effects_replication(
    redis_server: RedisServer, redis_version_info: tuple[int, ...]
) -> None:
    """A 6.2 server set to replicate scripts verbatim still runs every command."""
    if redis_version_info[0] >= 7:
        pytest.skip("Redis 7 always replicates scripts by their effects")
    with RedisServer(redis_server.binary,
                     extra_args=["--lua-replicate-commands", "no"]) as server:
        with Client(server.url, worker_name="w") as client:
            jid = client.queues["q"].put("K", {})
            job = client.queues["q"].pop()
            assert job is not None and job.jid == jid
            assert job.complete() == "complete"
