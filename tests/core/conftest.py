"""Raw-protocol harness: call the assembled script exactly as any qless client would."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.engine.bundles import bundle_text
from django_qless.core.engine.lua import function_name, library_text, script_text
from django_qless.core.hotpath import decode_worker_reply
from django_qless.core.queue import Queue
from tests.core import keyspace_mode
from tests.core.handoff_listener import listen  # noqa: F401 (the hand-off channel fixture)
from tests.core.keyspace_mode import KEYSPACE, ShardRedis, monitor_events, to_default


class Lua:
    """Call the engine as a client would: FCALL of the function library on Redis 7+ (as our
    client does), EVALSHA of the script on 6.2 or with QLESS_ENGINE_CALL=script: each command's
    own script (bundle), as our client calls it, unless QLESS_ENGINE_BUNDLES=0.

    By default the engine's testing variant, which takes `now` as given, so tests move time
    by the `now` they pass; `caller_time=False` is the engine as shipped, which bounds `now`
    by the server's clock."""

    def __init__(self, conn: redis.Redis, caller_time: bool = True) -> None:
        self.conn = conn
        self.script = conn.register_script(script_text(caller_time))
        self.caller_time = caller_time
        self.bundles = os.environ.get("QLESS_ENGINE_BUNDLES", "1") != "0"
        self.scripts: dict[str, Any] = {}
        mode = os.environ.get("QLESS_ENGINE_CALL", "auto")
        self.function: str | None = None
        if mode != "script" and int(str(conn.info("server")["redis_version"]).split(".")[0]) >= 7:
            # The function stays loaded across tests (FLUSHALL keeps it), as on a real server.
            name = function_name(caller_time)
            if not conn.function_list(library=name):
                conn.function_load(library_text(caller_time), replace=True)
            self.function = name

    def __call__(self, command: str, now: float | str, *args: Any) -> Any:
        """Run one command; `now` is the caller's clock; returns the raw reply."""
        argv = [command, now, *[json.dumps(a) if isinstance(a, (dict, list)) else a for a in args]]
        keys = keyspace_mode.keys()  # the shard prefix with QLESS_TEST_KEYSPACE
        if self.function is not None:
            return self.conn.fcall(self.function, len(keys), *keys, *argv)
        script = self.scripts.get(command)
        if script is None:
            text = bundle_text(command, self.caller_time) if self.bundles else None
            script = self.script if text is None else self.conn.register_script(text)
            self.scripts[command] = script
        return script(keys=keys, args=argv)

    def json(self, command: str, now: float | str, *args: Any) -> Any:
        """Run one command whose reply is a JSON document and decode it (the worker's calls'
        flat replies as the client decodes them, into the same dict)."""
        reply = self(command, now, *args)
        if isinstance(reply, list):
            return decode_worker_reply(reply)
        return None if reply is None else json.loads(reply)


@pytest.fixture
def lua(r: redis.Redis) -> Lua:
    """The engine, on a flushed database."""
    return Lua(r)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """In a shard keyspace, skip the audit tests written for the default layout (shard
    keyspaces have their own: test_audit_keyspace.py)."""
    if KEYSPACE is None:
        return
    skip = pytest.mark.skip(reason="audited per shard in test_audit_keyspace.py")
    for item in items:
        if "audit" in item.nodeid or "random_sequences" in item.nodeid:
            item.add_marker(skip)


if KEYSPACE is not None:
    @pytest.fixture
    def r(redis_url: str) -> Iterator[redis.Redis]:
        """The raw connection, its `ql:` names rewritten to the test keyspace's."""
        conn = ShardRedis.from_url(redis_url, decode_responses=True)
        yield conn
        conn.close()

    @pytest.fixture(autouse=True)
    def _clients_in_keyspace(monkeypatch: pytest.MonkeyPatch) -> None:
        """Every Client the tests make works in the test keyspace."""
        init = Client.__init__

        def shard_init(self: Client, *args: Any, **kwargs: Any) -> None:
            kwargs.setdefault("keyspace", KEYSPACE)
            init(self, *args, **kwargs)

        monkeypatch.setattr(Client, "__init__", shard_init)

if keyspace_mode.CLUSTER:
    # On a real cluster (-p tests.core.cluster_keyspace): its node's URL, its cluster clients.
    from tests.core.cluster_keyspace import (  # noqa: F401
        _clients_in_keyspace,
        keyspace_cluster,
        redis_url,
    )


@pytest.fixture
def events(r: redis.Redis, redis_url: str) -> Iterator[Callable[[], list[tuple[str, str]]]]:
    """Subscribe to every ql:* channel; call the fixture to get (channel, payload) so far."""
    if KEYSPACE is not None and int(str(r.info("server")["redis_version"]).split(".")[0]) >= 7:
        drain_monitor, close = monitor_events(redis_url)
        yield drain_monitor
        close()
        return
    pubsub = r.pubsub()
    pubsub.psubscribe("ql:*")
    pubsub.get_message(timeout=1.0)  # the psubscribe confirmation

    def drain() -> list[tuple[str, str]]:
        got = []
        while True:
            msg = pubsub.get_message(timeout=0.05)
            if msg is None:
                return got
            if msg["type"] == "pmessage":
                got.append((to_default(msg["channel"]), msg["data"]))

    yield drain
    pubsub.close()


def snapshot(conn: redis.Redis) -> dict[str, bytes]:
    """DUMP every key, for asserting that a refused command changed nothing."""
    kwargs = {**conn.connection_pool.connection_kwargs, "decode_responses": False}
    kwargs.pop("connection_class", None)
    raw = (redis.Redis(unix_socket_path=kwargs["path"], db=kwargs.get("db", 0)) if "path" in kwargs
           else redis.Redis(host=kwargs["host"], port=kwargs["port"]))  # a cluster node
    try:
        return {key.decode(): raw.dump(key) for key in sorted(raw.keys("*"))}
    finally:
        raw.close()


class FakeClock:
    """A settable clock (epoch seconds) to inject into a Client."""

    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


@pytest.fixture
def clock() -> FakeClock:
    """A fake clock; override the fixture in a module to start elsewhere."""
    return FakeClock()


@pytest.fixture
def client(redis_url: str, clock: FakeClock) -> Iterator[Client]:
    """A core Client named w1 on the flushed test database, on the fake clock."""
    client = Client(redis_url, worker_name="w1", _clock=clock)
    yield client
    client.close()


@pytest.fixture
def q(client: Client) -> Queue:
    """The queue named q."""
    return client.queues["q"]
