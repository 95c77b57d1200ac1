"""Run tests/core against a shard keyspace: `QLESS_TEST_KEYSPACE=s7 pytest tests/core`.

The engine calls of the fixtures pass the shard prefix `ql:{s7}:`; the raw connection `r`
rewrites the `ql:` names the tests use to that prefix, and names in replies back, so a test
written against the default layout checks the shard's keys; channels are collected with their
`ql:` names (MONITOR of the engine's SPUBLISH on Redis 7+, where pattern subscriptions see no
sharded message).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

import redis

__all__ = [
    "CLUSTER", "KEYSPACE", "PREFIX", "ShardRedis", "keys", "monitor_events", "publish", "subscribe",
    "to_default", "to_shard",
]

KEYSPACE: str | None = os.environ.get("QLESS_TEST_KEYSPACE") or None
PREFIX = "ql:" if KEYSPACE is None else f"ql:{{{KEYSPACE}}}:"
# Set by tests/core/cluster_keyspace.py: the keyspace lives on a real cluster.
CLUSTER = os.environ.get("QLESS_TEST_CLUSTER") == "1"


def keys() -> list[str]:
    """The engine keys of every call: none, or the shard prefix."""
    return [] if KEYSPACE is None else [PREFIX]


def to_shard(value: Any) -> Any:
    """A `ql:` name as the shard's (other values unchanged)."""
    if KEYSPACE is None:
        return value
    if isinstance(value, str) and value.startswith("ql:") and not value.startswith(PREFIX):
        return PREFIX + value[3:]
    if isinstance(value, bytes) and value.startswith(b"ql:") and not value.startswith(
        PREFIX.encode()
    ):
        return PREFIX.encode() + value[3:]
    return value


def to_default(value: Any) -> Any:
    """Names of the shard in a reply as `ql:` names, recursively."""
    if KEYSPACE is None:
        return value
    if isinstance(value, str):
        return "ql:" + value[len(PREFIX):] if value.startswith(PREFIX) else value
    if isinstance(value, bytes):
        p = PREFIX.encode()
        return b"ql:" + value[len(p):] if value.startswith(p) else value
    if isinstance(value, list):
        return [to_default(v) for v in value]
    if isinstance(value, tuple):
        return tuple(to_default(v) for v in value)
    if isinstance(value, set):
        return {to_default(v) for v in value}
    if isinstance(value, dict):
        return {to_default(k): to_default(v) for k, v in value.items()}
    return value


_NO_REWRITE = {"FCALL", "FCALL_RO", "EVALSHA", "EVAL", "FUNCTION", "SCRIPT", "PUBLISH",
               "SUBSCRIBE", "PSUBSCRIBE", "CONFIG", "INFO", "CLIENT"}


def _shard_args(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """A command's arguments with `ql:` names as the shard's (not for engine calls)."""
    if args and str(args[0]).upper() not in _NO_REWRITE:
        return tuple(to_shard(a) for a in args)
    return args


class ShardPipeline(redis.client.Pipeline):
    """A pipeline of ShardRedis."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Queue the command with shard names."""
        return super().execute_command(*_shard_args(args), **options)

    def execute(self, raise_on_error: bool = True) -> Any:
        """Run the queued commands; names in the replies back as `ql:`."""
        return to_default(super().execute(raise_on_error))


class ShardRedis(redis.Redis):
    """A redis-py client whose `ql:` key names are the shard's (tests only)."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        """Rewrite key-like arguments to the shard, and names in the reply back."""
        return to_default(super().execute_command(*_shard_args(args), **options))

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> Any:
        """A pipeline rewriting names as this client does."""
        return ShardPipeline(self.connection_pool, self.response_callbacks, transaction,
                             shard_hint)


def sharded_pubsub(r: redis.Redis) -> bool:
    """Whether the engine publishes the test keyspace's channels with SPUBLISH."""
    return KEYSPACE is not None and int(str(r.info("server")["redis_version"]).split(".")[0]) >= 7


def subscribe(pubsub: Any, r: redis.Redis, channel: str) -> None:
    """Subscribe `pubsub` to the `ql:` channel `channel` of the test keyspace."""
    if sharded_pubsub(r):
        pubsub.ssubscribe(to_shard(channel))
    else:
        pubsub.subscribe(to_shard(channel))


def publish(r: redis.Redis, channel: str, payload: str) -> None:
    """Publish on the `ql:` channel `channel` of the test keyspace, as the engine would."""
    if sharded_pubsub(r):
        r.execute_command("SPUBLISH", to_shard(channel), payload)
    else:
        r.execute_command("PUBLISH", to_shard(channel), payload)


_ARG = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_ESC = re.compile(rb'\\(x[0-9a-fA-F]{2}|.)')
_SIMPLE = {b"n": b"\n", b"r": b"\r", b"t": b"\t", b"a": b"\a", b"b": b"\b"}


def _unescape(raw: bytes) -> str:
    """Undo MONITOR's quoting of one argument."""
    def one(m: re.Match[bytes]) -> bytes:
        e = m.group(1)
        if e[:1] == b"x" and len(e) == 3:
            return bytes([int(e[1:], 16)])
        return _SIMPLE.get(e, e)
    return _ESC.sub(one, raw).decode("utf-8", "replace")


def monitor_events(url: str) -> tuple[Callable[[], list[tuple[str, str]]], Callable[[], None]]:
    """Collect (channel, payload) of every (S)PUBLISH on the server, channel as `ql:` name."""
    conn = redis.Redis.from_url(url)
    mon = conn.monitor()
    mon.__enter__()
    c = mon.connection

    def drain() -> list[tuple[str, str]]:
        got = []
        while c.can_read(timeout=0.05):
            line = c.read_response()
            if not isinstance(line, bytes):
                continue
            args = [_unescape(a) for a in _ARG.findall(line.split(b"] ", 1)[-1])]
            if len(args) == 3 and args[0].upper() in ("PUBLISH", "SPUBLISH"):
                got.append((to_default(args[1]), args[2]))
        return got

    def close() -> None:
        mon.__exit__(None, None, None)
        conn.close()

    return drain, close
