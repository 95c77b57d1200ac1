"""The events listener: subscribe-before-return, callbacks, reconnects, PONG checks, stop."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_qless.core import Client, Events, QlessConnectionError
from tests.core.keyspace_mode import to_shard


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    client = Client(redis_url, worker_name="w1")
    yield client
    client.close()


class Collector:
    """A thread-safe list of events with a wait helper."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self._cond = threading.Condition()

    def __call__(self, event: dict[str, Any]) -> None:
        with self._cond:
            self.items.append(event)
            self._cond.notify_all()

    def wait_for(self, predicate: Callable[[list[dict[str, Any]]], bool],
                 timeout: float = 5.0) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: predicate(self.items), timeout)


def wait_until(predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def subscriber_ids(r: redis.Redis) -> set[str]:
    """Ids of the connections holding subscriptions (the session's server may still hold
    some of earlier tests' listeners while they linger or exit)."""
    return {c["id"] for c in r.client_list() if int(c.get("sub", 0)) > 0}


def test_start_returns_once_subscribed(client: Client, r: redis.Redis) -> None:
    before = subscriber_ids(r)
    events = client.events()
    got = Collector()
    events.on("put", got)
    events.start()
    try:
        assert events.listening
        # No sleep: the subscription is confirmed, so the very first event is delivered.
        jid = client.queues["q"].put("K", {})
        assert got.wait_for(lambda items: any(e.get("jid") == jid for e in items))
        assert got.items[0]["event"] == "put"
        assert got.items[0]["queue"] == "q"
        assert got.items[0]["channel"] == to_shard("ql:log")
    finally:
        events.stop()
    assert not events.listening
    assert wait_until(lambda: not subscriber_ids(r) - before)


def test_tracked_jid_channels_and_wildcard(client: Client) -> None:
    q = client.queues["q"]
    jid = q.put("K", {})
    client.track(jid)
    every = Collector()
    completed = Collector()
    with client.events() as events:
        events.on("*", every)
        events.on("completed", completed)
        job = q.pop()
        assert job is not None
        job.complete()
        assert completed.wait_for(lambda items: len(items) == 2)
    channels = sorted(e["channel"] for e in completed.items)
    assert channels == [to_shard("ql:completed"), to_shard("ql:log")]
    completed_event = {"event": "completed", "jid": jid, "channel": to_shard("ql:completed")}
    assert completed_event in completed.items
    assert any(e["event"] == "popped" and e["jid"] == jid for e in every.items)


def test_worker_channel(client: Client) -> None:
    q = client.queues["q"]
    jid = q.put("K", {})
    assert q.pop() is not None
    got = Collector()
    with Events(client, worker="w1", channels=()) as events:
        assert events.channels == (to_shard("ql:w:w1"),)
        events.on("lock_lost", got)
        client.jobs[jid].timeout()
        assert got.wait_for(lambda items: len(items) == 1)
    assert got.items[0]["jid"] == jid
    assert got.items[0]["channel"] == to_shard("ql:w:w1")


def test_a_failing_callback_does_not_stop_the_others(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    got = Collector()

    def broken(event: dict[str, Any]) -> None:
        raise RuntimeError("callback bug")

    with client.events() as events:
        events.on("put", broken)
        events.on("put", got)
        with caplog.at_level(logging.ERROR, logger="django_qless"):
            client.queues["q"].put("K", {})
            client.queues["q"].put("K", {})
            assert got.wait_for(lambda items: len(items) == 2)
        events.off("put", broken)
    assert sum("callback" in rec.getMessage() for rec in caplog.records) == 2
    assert all(rec.name == "django_qless" for rec in caplog.records)


def test_reconnects_after_client_kill(client: Client, r: redis.Redis) -> None:
    got = Collector()
    with client.events(health_check_interval=1.0) as events:
        events.on("put", got)
        assert events.connects == 1
        killed = r.execute_command("CLIENT", "KILL", "TYPE", "pubsub")
        assert int(killed) >= 1
        assert wait_until(lambda: events.connects >= 2 and events.listening)
        jid = client.queues["q"].put("K", {})
        assert got.wait_for(lambda items: any(e.get("jid") == jid for e in items))


def test_missing_pong_forces_a_reconnect(
    client: Client, r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    got = Collector()
    with caplog.at_level(logging.WARNING, logger="django_qless"):
        with client.events(health_check_interval=0.2) as events:
            events.on("put", got)
            # While every client is paused the PING gets no PONG: the socket looks
            # half-open, so the listener must give up on it and reconnect.
            r.execute_command("CLIENT", "PAUSE", 1200, "ALL")
            assert wait_until(lambda: events.connects >= 2 and events.listening, timeout=10)
            jid = client.queues["q"].put("K", {})
            assert got.wait_for(lambda items: any(e.get("jid") == jid for e in items))
    assert any("no PONG" in rec.getMessage() for rec in caplog.records)


def test_health_check_pings_keep_an_idle_listener(client: Client) -> None:
    got = Collector()
    with client.events(health_check_interval=0.1) as events:
        events.on("put", got)
        time.sleep(0.6)
        assert events.connects == 1
        client.queues["q"].put("K", {})
        assert got.wait_for(lambda items: len(items) == 1)


def test_start_fails_cleanly_when_redis_is_unreachable(tmp_path: Any) -> None:
    client = Client(f"unix://{tmp_path}/none.sock", worker_name="w1")
    events = client.events()
    with pytest.raises(QlessConnectionError):
        events.start(timeout=0.5)
    assert not events.listening
    client.close()
