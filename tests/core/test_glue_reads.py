"""The core methods the Django glue reads through (batched reads, cancel, locks, the log feed)."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
import redis
from redis.exceptions import LockError

from django_qless.core import Client, Queue, ThrottleInfo
from django_qless.core.events import EVENT_CHANNELS, LOG_CHANNEL
from django_qless.core.exceptions import DependencyError, InvalidArgument
from django_qless.core.feed import LogFeed
from django_qless.core.health import ACL_CHANNELS, ACL_KEYS, SAFE_POLICY, probe
from django_qless.core.throttle import queue_throttle_id
from tests.core.conftest import FakeClock
from tests.core.keyspace_mode import publish


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(3_000_000.0)


def test_throttles_get_many(client: Client) -> None:
    client.throttles["a"].set(3)
    client.throttles["b"].set(1, ttl=100)
    infos = client.throttles.get_many(["b", "missing", "a"])
    assert [i.id for i in infos] == ["b", "missing", "a"]
    assert infos[0].maximum == 1 and 0 < infos[0].ttl <= 100 and infos[0].defined
    assert infos[1] == ThrottleInfo("missing", 0, -2) and not infos[1].defined
    assert infos[2] == ThrottleInfo("a", 3, -1) and infos[2].defined
    assert client.throttles.get_many([]) == []
    with pytest.raises(InvalidArgument):
        client.throttles.get_many(["x" * 200])


def test_throttle_info_from_reply() -> None:
    assert ThrottleInfo.from_reply("t", '{"maximum": 2, "ttl": 5}') == ThrottleInfo("t", 2, 5)
    assert ThrottleInfo.from_reply("t", None) == ThrottleInfo("t", 0, -2)
    assert ThrottleInfo.from_reply("t", "not json") == ThrottleInfo("t", 0, -2)


def test_queue_throttles_batched(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="a")
    clock.advance(1)
    client.queues["other"].put("K", {}, jid="b")
    q.set_throttle(2)
    assert q.throttle.id == queue_throttle_id("q")
    assert q.throttle.maximum == 2
    found = client.queues.throttles()
    assert list(found) == ["q", "other"]
    assert found["q"] == ThrottleInfo(queue_throttle_id("q"), 2, -1)
    assert not found["other"].defined
    assert list(client.queues.throttles(["other"])) == ["other"]
    with pytest.raises(InvalidArgument):
        q.set_throttle(-1)


def test_queue_throttle_caps_pops(client: Client, q: Queue, clock: FakeClock) -> None:
    for jid in ("a", "b"):
        clock.advance(1)
        q.put("K", {}, jid=jid)
    q.set_throttle(1)
    assert len(q.pop(2)) == 1
    assert len(q.jobs.throttled()) == 1


def test_stats_many(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="a")
    clock.advance(2)
    job = q.pop()
    assert job is not None
    job.complete()
    stats = client.queues.stats_many(["q", "empty"], clock.t)
    assert stats["q"]["wait"]["count"] == 1 and stats["q"]["run"]["count"] == 1
    assert stats["q"] == q.stats(clock.t)
    assert stats["empty"]["wait"]["count"] == 0
    assert client.queues.stats_many([]) == {}
    assert client.queues.stats_many(["q"])["q"]["wait"]["count"] == 1


def test_completed_per_interval(client: Client, q: Queue, clock: FakeClock) -> None:
    start = clock.t
    for jid, offset in (("a", 10), ("b", 70), ("c", 75)):
        clock.t = start + offset
        q.put("K", {}, jid=jid)
        job = q.pop()
        assert job is not None
        job.complete()
    clock.t = start + 120
    assert client.jobs.completed_per_interval(3, 60.0) == [0, 1, 2]
    assert client.jobs.completed_per_interval(2, 60.0, until=start + 60) == [0, 1]
    assert client.jobs.completed_per_interval(1, 200.0) == [3]
    # a completion stamped by a clock a little ahead of this client's counts as the newest
    clock.t = start + 120.4
    q.put("K", {}, jid="d")
    ahead = q.pop()
    assert ahead is not None
    ahead.complete()
    clock.t = start + 120
    assert client.jobs.completed_per_interval(3, 60.0) == [0, 1, 3]
    assert client.jobs.completed_per_interval(3, 60.0, until=start + 120) == [0, 1, 2]
    with pytest.raises(InvalidArgument):
        client.jobs.completed_per_interval(0)


def test_cancel_many(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b")
    q.put("K", {}, jid="c", depends=["a"])
    assert client.jobs.cancel() == []
    with pytest.raises(DependencyError):
        client.jobs.cancel("a")  # c depends on it: nothing is canceled
    assert client.jobs.get("a") is not None
    assert sorted(client.jobs.cancel("a", "c", "b")) == ["a", "b", "c"]
    assert client.jobs.get_many("a", "b", "c") == []
    with pytest.raises(InvalidArgument):
        client.jobs.cancel("bad jid with spaces\n")


def test_unique_lock_serialises(client: Client) -> None:
    order: list[str] = []
    with client.jobs.unique_lock("j1", timeout=5, wait=5):
        def other() -> None:
            with client.jobs.unique_lock("j1", timeout=5, wait=5):
                order.append("other")

        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.2)
        order.append("first")
    thread.join(5)
    assert order == ["first", "other"]
    with client.jobs.unique_lock("j2"), pytest.raises(LockError):
        with client.jobs.unique_lock("j2", wait=0.1):
            pass


def test_log_feed(client: Client, q: Queue) -> None:
    assert LOG_CHANNEL in EVENT_CHANNELS
    with LogFeed(client) as feed:
        assert feed.open(timeout=5.0)
        assert feed.next(timeout=0.05) is None
        publish(client.redis, LOG_CHANNEL, "not json")
        publish(client.redis, LOG_CHANNEL, "[1, 2]")
        q.put("K", {}, jid="a")
        got = [feed.next(timeout=1.0) for _ in range(3)]
    assert got[:2] == [None, None]
    assert got[2] is not None and got[2]["event"] == "put" and got[2]["jid"] == "a"


def test_probe(client: Client) -> None:
    result = probe(client)
    assert result.policy == SAFE_POLICY
    assert abs(result.skew) < 5
    assert ACL_KEYS.startswith("~") and ACL_CHANNELS.startswith("&")
    dead = redis.Redis(unix_socket_path="/nonexistent/qless-probe", decode_responses=True)
    with pytest.raises(redis.RedisError):
        probe(dead)


def test_close_shared_pool(redis_url: str) -> None:
    shared = redis.Redis.from_url(redis_url, decode_responses=True)
    client = Client(shared)
    assert client.redis is shared
    assert isinstance(client.config.all, dict)  # opens a connection in the shared pool
    assert shared.ping()
    pool: Any = shared.connection_pool

    def connected() -> int:
        conns = [*pool._available_connections, *pool._in_use_connections]
        return sum(1 for c in conns if c._sock is not None)

    client.close()
    assert connected() >= 1  # the caller's pool is left alone
    client.close(shared=True)
    assert connected() == 0
    assert shared.ping()  # the pool reconnects on demand
    shared.close()


def test_queue_settings_in_one_read(client: Client, q: Queue) -> None:
    settings = q.settings()
    assert (settings.heartbeat, settings.max_concurrency) == (60, 0)
    assert settings.throttle == ThrottleInfo(queue_throttle_id("q"), 0, -2)
    client.config["heartbeat"] = 40
    assert q.settings().heartbeat == 40 == q.heartbeat
    q.heartbeat = 45
    q.max_concurrency = 3
    q.set_throttle(2)
    settings = q.settings()
    assert (settings.heartbeat, settings.max_concurrency) == (45, 3)
    assert (settings.heartbeat, settings.max_concurrency) == (q.heartbeat, q.max_concurrency)
    assert settings.throttle.maximum == 2 and settings.throttle.defined
