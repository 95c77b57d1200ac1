"""The engine channel of one shard of a Redis Cluster: the cluster transport, keyed calls.

Same surface as `channel.NodeChannel`, so a `Client` bound to a shard works like one bound
to a single server. Every engine call declares the shard's prefix as its one key; the
transport (`cluster.py`) sends it to the primary owning that slot, follows the cluster
through failovers and slot moves, and never sends a write twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Container, Sequence
from typing import Any

import redis
from redis import Redis
from redis.cluster import RedisCluster

from ..engine.channel import TRANSPORT_ERRORS, utf8_error
from ..engine.invoke import Invoker, Keyspace, send
from ..exceptions import InvalidArgument, error_from_reply
from .batch import did_not_run, execute_many
from .transport import ClusterTransport

__all__ = ["ShardChannel", "open_shard_channel"]


class ShardChannel:
    """The engine of one shard (keyspace prefix `ql:{<tag>}:`) over a cluster transport."""

    def __init__(self, transport: ClusterTransport, invoker: Invoker) -> None:
        if not invoker.keys:
            raise ValueError("a shard channel needs a shard keyspace")
        self.transport = transport
        self.invoker = invoker
        self.prefix = invoker.keys[0]

    def __repr__(self) -> str:
        return f"<ShardChannel {self.prefix} on {self.transport.primary_for(self.prefix)}>"

    @property
    def redis(self) -> RedisCluster:
        """Return the redis-py cluster client (plain reads route by key; all keys of the
        shard share one slot)."""
        return self.transport.redis_cluster

    @property
    def mode(self) -> str:
        """Return how the engine is called: function (FCALL), script (EVALSHA) or auto."""
        return self.transport.mode

    def load(self) -> None:
        """Load the engine on every primary of the cluster."""
        self.transport.load_engine()

    def close(self) -> None:
        """Nothing to drop: the transport (shared by every shard) keeps the connections."""

    def close_shared(self) -> None:
        """Close the transport and the redis-py cluster client the caller passed in."""
        self.transport.close()
        self.transport.redis_cluster.close()

    def disconnect(self) -> None:
        """Close the transport's idle connections (every shard's: they share them)."""
        self.transport.disconnect()

    def server_time(self) -> tuple[Any, Any]:
        """Return `TIME` of the primary serving this shard, the clock its engine calls read,
        asked on the connection they use (redis-py's `time()` asks a node of its choosing,
        on a connection of its own)."""
        seconds, micros = self.transport.execute(("TIME",), node=self.node(), read_only=True)
        return int(seconds), int(micros)

    def node(self) -> str:
        """Return `host:port` of the primary serving this shard now."""
        return self.transport.primary_for(self.prefix)

    def node_redis(self) -> Redis:
        """Return the redis-py client of the primary serving this shard now."""
        rc = self.transport.redis_cluster
        node = rc.get_node(node_name=self.node())  # type: ignore[no-untyped-call, unused-ignore]
        if node is None:
            self.transport.refresh()
            node = rc.get_node(node_name=self.node())  # type: ignore[no-untyped-call, unused-ignore]
        return rc.get_redis_connection(node)

    def pubsub_node(self, stale: bool, open_nodes: Container[str]) -> tuple[str, Redis]:
        """Return the address and client of this shard's primary for a pub/sub hub, reading
        the slot map again first if `stale`; `open_nodes`: the hub's connections."""
        if stale:
            self.transport.refresh()  # no node answering: the lookup below fails, we retry
        node_redis, address = self.node_redis(), self.node()
        if (stale or address not in open_nodes) and _role(node_redis) != "master":
            # Our map predates a failover (a replica also takes SSUBSCRIBE, and would hear
            # its primary's messages only while it stays its replica): read it again.
            self.transport.refresh()
            node_redis, address = self.node_redis(), self.node()
            if _role(node_redis) != "master":  # the cluster has not agreed yet: try later
                raise redis.ConnectionError("the shard has no primary in the map yet")
        return address, node_redis

    def command(self, argv: Sequence[str]) -> tuple[Any, ...]:
        """Return the FCALL/EVALSHA running `argv` (command, now, args) in this shard, in the
        cluster's mode (loading the engine first if the mode is not known yet)."""
        if self.transport.mode == "auto":
            self.transport.load_engine()
        self.invoker.mode = self.transport.mode
        return self.invoker.command(argv)

    def invoke(self, argv: Sequence[str]) -> Any:
        """Call the engine once; the transport resends only what did not run."""
        try:
            return self.transport.execute(self.command(argv), key=self.prefix)
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc
        except UnicodeEncodeError as exc:
            raise utf8_error(exc) from None

    def invoke_many(self, argvs: Sequence[Sequence[str]]) -> list[Any]:
        """Call the engine for each argv in one round trip; errors returned as QlessError."""
        try:
            commands = [self.command(argv) for argv in argvs]
            replies = execute_many(self.transport, commands)
        except UnicodeEncodeError as exc:
            raise utf8_error(exc) from None
        return [error_from_reply(r) if isinstance(r, redis.ResponseError) else r
                for r in replies]

    def defer(self, argv: Sequence[str]) -> ShardPending | Done:
        """Send a replayable engine call on a side connection to the shard's primary now."""
        if self.transport.durable_replicas > 0:
            return Done(self.invoke(argv))  # the write must be confirmed before it counts
        return ShardPending(self, argv)


class Done:
    """A call already answered (what `defer` returns when it must wait anyway)."""

    __slots__ = ("_reply",)

    def __init__(self, reply: Any) -> None:
        self._reply = reply

    def reply(self) -> Any:
        """Return the reply."""
        return self._reply


class ShardPending:
    """One replayable engine call sent to the shard's primary; `reply()` reads it once.

    A reply saying the call did not run (MOVED, ASK, TRYAGAIN, missing code) or a lost reply
    sends it again through the transport, which follows the cluster; the attempt token makes
    the repeat of a call that did run return what it did.
    """

    __slots__ = ("_channel", "_command", "_pool", "_conn", "_pid")

    def __init__(self, channel: ShardChannel, argv: Sequence[str]) -> None:
        self._channel = channel
        self._command = channel.command(argv)
        self._pid = os.getpid()
        self._pool: Any = None
        self._conn: Any = None
        transport = channel.transport
        try:
            node = transport.redis_cluster.get_node(  # type: ignore[no-untyped-call, unused-ignore]
                node_name=channel.node())
            if node is None:
                return  # not in the slot map now: reply() sends it through the transport
            self._pool = transport.redis_cluster.get_redis_connection(node).connection_pool
            conn = self._pool.get_connection()
        except TRANSPORT_ERRORS:
            return
        try:
            send(conn, self._command)
        except UnicodeEncodeError as exc:
            self._pool.release(conn)
            raise utf8_error(exc) from None
        except TRANSPORT_ERRORS:
            conn.disconnect()
            self._pool.release(conn)
            return
        self._conn = conn

    def reply(self) -> Any:
        """Read the raw reply; resend through the transport when it did not run or was lost."""
        conn, self._conn = self._conn, None
        if conn is None or self._pid != os.getpid():
            return self._resend()
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:
            self._pool.release(conn)
            if did_not_run(exc):
                return self._resend()
            raise error_from_reply(exc) from exc
        except TRANSPORT_ERRORS:
            conn.disconnect()
            self._pool.release(conn)
            return self._resend()  # lost: the repeat gets what the first call did
        except BaseException:
            conn.disconnect()  # interrupted mid-reply: what is left on it is unknown
            self._pool.release(conn)
            raise
        self._pool.release(conn)
        return reply

    def _resend(self) -> Any:
        """Send the call through the transport (it applies the cluster's resend rules)."""
        try:
            return self._channel.transport.execute(self._command, key=self._channel.prefix)
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc


def open_shard_channel(
    target: RedisCluster | ClusterTransport, tag: str | None, engine: str | None,
    *, caller_time: bool,
) -> tuple[ShardChannel, Callable[[], None] | None]:
    """Build the channel of shard `tag` over a cluster client or transport; also return what
    closes the transport built here (None: the caller owns it)."""
    if not isinstance(target, (RedisCluster, ClusterTransport)):
        raise InvalidArgument(f"a client needs a URL, a redis.Redis, a channel or a cluster "
                              f"client, got {type(target).__name__}")
    if tag is None:
        raise InvalidArgument("a client on a Redis Cluster serves one shard: give "
                              "keyspace=<tag>, or use ShardedClient")
    mode = engine or os.environ.get("QLESS_ENGINE_CALL", "auto")
    invoker = Invoker(mode, caller_time=caller_time, keys=Keyspace(tag).engine_keys)
    if isinstance(target, RedisCluster):
        transport = ClusterTransport(target, engine=mode, caller_time=caller_time)
        return ShardChannel(transport, invoker), transport.close
    if invoker.sha not in target.engine_names:
        raise InvalidArgument("the transport was built for the other engine variant "
                              "(caller_time)")
    return ShardChannel(target, invoker), None


def _role(node_redis: Any) -> str:
    """Return the node's replication role ("master" for a primary)."""
    return str(node_redis.execute_command("ROLE")[0])
