"""The engine channel of one Redis server: kept connections, engine loading, no resends.

A `Client` holds one channel and calls the engine only through it: `invoke` (one call),
`invoke_many` (one round trip) and `defer` (send now, read the reply later). This channel
serves a single server (or a Sentinel-managed primary); `shard_channel.ShardChannel` serves
one shard of a Redis Cluster with the same surface, so the client and the worker's hot path
do not know which they hold.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Container, Sequence
from typing import Any, Protocol

import redis
from redis import Redis
from redis.exceptions import ResponseError

from ..exceptions import InvalidArgument, QlessConnectionError, QlessError, error_from_reply
from .invoke import Invoker, send, send_checked

__all__ = ["Channel", "NodeChannel", "Pending", "TRANSPORT_ERRORS", "connection_error"]

TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


def connection_error(exc: BaseException) -> QlessConnectionError:
    """Wrap a transport error (the call may or may not have run)."""
    return QlessConnectionError(f"{type(exc).__name__}: {exc}")


def utf8_error(exc: UnicodeEncodeError) -> InvalidArgument:
    """Say that an argument could not be packed (raised before anything was sent)."""
    return InvalidArgument(f"argument is not valid UTF-8 text: {exc.reason}")


class Pending(Protocol):
    """An engine call sent and not read yet."""

    def reply(self) -> Any:
        """Read the raw reply once (after a lost reply, the call is sent again)."""


class Channel(Protocol):
    """How a client reaches the engine of its keyspace."""

    @property
    def redis(self) -> Any:
        """Return the redis-py client for plain reads and pub/sub (Redis or RedisCluster)."""

    @property
    def mode(self) -> str:
        """Return how the engine is called: function, script, or auto (not decided yet)."""

    def node_redis(self) -> Redis:
        """Return a redis-py client of the server holding this keyspace now (for pub/sub,
        SCAN and server commands; on a cluster, ask again after a failover)."""

    def pubsub_node(self, stale: bool, open_nodes: Container[str]) -> tuple[str, Redis]:
        """Return the address and client of the server a pub/sub hub listens on now."""

    def load(self) -> None:
        """Load the engine where this channel calls it."""

    def server_time(self) -> tuple[Any, Any]:
        """Return the server's `TIME` reply (seconds, microseconds)."""

    def invoke(self, argv: Sequence[str]) -> Any:
        """Call the engine once with `argv` (command, now, args); never resend a write."""

    def invoke_many(self, argvs: Sequence[Sequence[str]]) -> list[Any]:
        """Call the engine for each argv in one round trip; errors returned as QlessError."""

    def defer(self, argv: Sequence[str]) -> Pending:
        """Send a replayable engine call now; read its reply later."""

    def close(self) -> None:
        """Drop the connections this channel keeps."""

    def close_shared(self) -> None:
        """Close the connections of what the caller passed in (a pool, a cluster client)."""

    def disconnect(self) -> None:
        """Close every connection open for this channel; the next call opens one again."""


class NodeChannel:
    """The engine on one Redis server, over a redis-py connection pool."""

    def __init__(self, conn: Redis, invoker: Invoker) -> None:
        self._redis = conn
        self.invoker = invoker
        # On a server without functions, EVALSHA each command's own script (loaded before its
        # first call): the full script rebuilds every helper on every call.
        invoker.bundles = os.environ.get("QLESS_ENGINE_BUNDLES", "1") != "0"
        self._ready: set[str] = set()  # the shas of the scripts this channel loaded
        self._pinned: tuple[int, int, Any] | None = None  # (thread, pid, connection)
        self._pinned_used = 0.0  # when the pinned connection last sent (monotonic)
        self._side = SideConnections(conn.connection_pool)

    def __repr__(self) -> str:
        return f"<NodeChannel {self._redis.connection_pool!r}>"

    @property
    def redis(self) -> Redis:
        """Return the redis-py client (decoded strings; commands are not retried)."""
        return self._redis

    @property
    def mode(self) -> str:
        """Return how the engine is called: function (FCALL), script (EVALSHA) or auto."""
        return self.invoker.mode

    def node_redis(self) -> Redis:
        """Return the redis-py client of the server (the same as `redis`)."""
        return self._redis

    def pubsub_node(self, stale: bool, open_nodes: Container[str]) -> tuple[str, Redis]:
        """Return the address and client of the server a pub/sub hub listens on (this one)."""
        return f"pool:{id(self._redis)}", self._redis

    def close(self) -> None:
        """Give the pinned connection back (the pool is the client's to close)."""
        self.unpin()

    def close_shared(self) -> None:
        """Close the connection pool the caller passed in."""
        self._redis.close()
        self._redis.connection_pool.disconnect()

    def disconnect(self) -> None:
        """Close the connections this channel keeps and the pool's idle ones; each is opened
        again when next used (the kept ones stay kept: safe while another thread owns one)."""
        pinned = self._pinned
        if pinned is not None and pinned[1] == os.getpid():
            pinned[2].disconnect()
        self._side.disconnect()
        self._redis.connection_pool.disconnect(inuse_connections=False)

    def server_time(self) -> tuple[Any, Any]:
        """Return `TIME`, asked on the connection engine calls use: read through the pool
        instead, the clock's refresh once a minute kept a second connection open for good."""
        seconds, micros = self.execute(("TIME",))
        return seconds, micros

    # -- sending ---------------------------------------------------------------------

    def execute(self, args: Sequence[Any]) -> Any:
        """Send one command without any retry.

        The first thread to call keeps one pooled connection for itself (redis-py's pool
        get/release costs ~5 µs a call, as much as the engine's own work on a cheap command);
        other threads, and every call after a transport error, go through the pool. The kept
        connection is checked before use when it sat idle, as the pool checks the ones it
        hands out, so the first call after a Redis restart does not fail on a dead socket.
        """
        pinned = self._pinned
        if pinned is not None and pinned[1] != os.getpid():
            pinned = self._pinned = None  # inherited across fork: the pool starts afresh
        if pinned is not None:
            owner, _, conn = pinned
            if owner != threading.get_ident():
                return self._execute_pooled(args)
        else:
            conn = self._redis.connection_pool.get_connection()
            self._pinned = (threading.get_ident(), os.getpid(), conn)
        try:
            self._pinned_used = send_checked(conn, args, self._pinned_used)
            return conn.read_response()
        except redis.ResponseError:
            raise  # an error reply: the connection is fine
        except BaseException:
            self.unpin()
            raise

    def _execute_pooled(self, args: Sequence[Any]) -> Any:
        """Send one command on a connection taken from the pool for this call."""
        pool = self._redis.connection_pool
        conn: Any = pool.get_connection()
        try:
            send(conn, args)
            return conn.read_response()
        finally:
            pool.release(conn)

    def unpin(self) -> None:
        """Give the pinned connection back (disconnected); the next call pins a fresh one."""
        pinned, self._pinned = self._pinned, None
        if pinned is not None and pinned[1] == os.getpid():
            pinned[2].disconnect()
            self._redis.connection_pool.release(pinned[2])

    def _execute_many(self, commands: Sequence[Sequence[Any]]) -> list[Any]:
        """Send commands in one round trip; error replies are returned, not raised."""
        pool = self._redis.connection_pool
        conn: Any = pool.get_connection()
        try:
            conn.send_packed_command(conn.pack_commands(commands))
            replies: list[Any] = []
            for _ in commands:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
            return replies
        finally:
            pool.release(conn)

    # -- loading ---------------------------------------------------------------------

    def load_script(self, text: str | None = None, expected: str | None = None) -> str:
        """Load the engine (or the script `text` of sha `expected`: one command's) into the
        server's script cache; return its sha."""
        text = self.invoker.script() if text is None else text
        expected = self.invoker.sha if expected is None else expected
        try:
            sha = str(self.execute(("SCRIPT", "LOAD", text)))
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc
        except TRANSPORT_ERRORS as exc:
            # SCRIPT LOAD is idempotent, so one retry is safe.
            try:
                sha = str(self.execute(("SCRIPT", "LOAD", text)))
            except TRANSPORT_ERRORS as again:
                raise connection_error(again) from exc
        if sha != expected:
            raise QlessError(f"server computed sha {sha} for the script, expected {expected}")
        self._ready.add(sha)
        return sha

    def prepare(self, command: Sequence[Any]) -> None:
        """Load the script that the EVALSHA `command` names (its command's own, or the full
        one) if this channel has not yet.

        Loading before the first call, not on its NOSCRIPT reply, keeps calls in flight in
        their order (a deferred call answered NOSCRIPT would run again after later ones).
        """
        if command[0] == "EVALSHA" and command[1] not in self._ready:
            self.load_script(self.invoker.script_of(command), command[1])

    def load(self) -> None:
        """Load the engine the way it is called: the function library; on a server without
        functions the full script, unless each command calls its own (`prepare` loads that
        before the command's first call)."""
        invoker = self.invoker
        if invoker.mode == "script":
            self._load_scripted()
            return
        try:
            self.execute(("FUNCTION", "LOAD", invoker.library()))
        except redis.ResponseError as exc:
            if "already exists" in str(exc):
                pass  # another client loaded this same version first
            elif invoker.falls_back(exc):
                invoker.mode = "script"
                self._load_scripted()
                return
            else:
                raise error_from_reply(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from exc
        invoker.mode = "function"

    def _load_scripted(self) -> None:
        # (Each command's own script is loaded by `prepare`: the full one, over a megabyte of
        # the server's memory and of its Lua heap, only where a call names it.)
        if not self.invoker.bundles:
            self.load_script()

    def recover(self, exc: ResponseError, sent: Sequence[Any]) -> None:
        """Make the engine callable after a reply to `sent` saying it was missing (nothing
        ran): load the script that `sent` named, or the engine the way it is called."""
        invoker = self.invoker
        if sent[0] == "EVALSHA" and invoker.mode == "script":
            self.load_script(invoker.script_of(sent), sent[1])
            return
        if invoker.falls_back(exc):
            invoker.mode = "script"
        self.load()

    # -- engine calls ----------------------------------------------------------------

    def invoke(self, argv: Sequence[str]) -> Any:
        """Call the engine; if it is not loaded, load it and call again (it did not run)."""
        invoker = self.invoker
        try:
            command = invoker.command(argv)
            self.prepare(command)
            try:
                return self.execute(command)
            except redis.ResponseError as exc:
                if not invoker.missing(exc, command):
                    raise
                self.recover(exc, command)
            command = invoker.command(argv)
            self.prepare(command)
            try:
                return self.execute(command)
            except redis.ResponseError as exc:
                if not invoker.missing(exc, command):
                    raise
                # Flushed again between our load and the call (a flush storm): EVAL sends
                # the text itself, so it cannot miss. Safe: a missing engine means nothing ran.
                keys = invoker.keys
                text = invoker.script_of(command) if command[0] == "EVALSHA" else invoker.script()
                return self.execute(("EVAL", text, len(keys), *keys, *argv))
        except redis.ResponseError as exc:
            raise error_from_reply(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise connection_error(exc) from exc
        except UnicodeEncodeError as exc:
            raise utf8_error(exc) from None

    def invoke_many(self, argvs: Sequence[Sequence[str]]) -> list[Any]:
        """Call the engine for each argv in one round trip; errors returned as QlessError.

        If the engine was flushed midway, only the calls that found it missing are run
        again (the others had executed).
        """
        invoker = self.invoker
        if invoker.mode == "auto":
            self.load()
        results: list[Any] = [None] * len(argvs)
        pending = list(range(len(argvs)))
        for attempt in range(2):
            try:
                sent = [invoker.command(argvs[i]) for i in pending]
                for command in {c[1]: c for c in sent}.values():
                    self.prepare(command)
                replies = self._execute_many(sent)
            except TRANSPORT_ERRORS as exc:
                raise connection_error(exc) from exc
            except UnicodeEncodeError as exc:
                raise utf8_error(exc) from None
            missing = []
            # (one per script found missing: calls of several commands may each need theirs)
            lost: dict[Any, tuple[ResponseError, Sequence[Any]]] = {}
            for index, command, reply in zip(pending, sent, replies, strict=True):
                failed = isinstance(reply, redis.ResponseError)
                if attempt == 0 and failed and invoker.missing(reply, command):
                    missing.append(index)
                    lost.setdefault(command[1], (reply, command))
                elif isinstance(reply, redis.ResponseError):
                    results[index] = error_from_reply(reply)
                else:
                    results[index] = reply
            if not lost:
                break
            for error, named in lost.values():
                self.recover(error, named)
            pending = missing
        return results

    def defer(self, argv: Sequence[str]) -> NodePending:
        """Send a replayable engine call on a side connection now; read its reply later."""
        return NodePending(self, argv)


class SideConnections:
    """A few pooled connections kept aside for deferred calls (one per call in flight).

    Job code running while a deferred call is in flight calls the engine on the thread's
    usual connection, and must never read that call's reply by mistake.
    """

    __slots__ = ("_pool", "_lock", "_idle")

    #: Connections kept between calls (a worker has at most two calls in flight).
    keep = 2

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._idle: list[tuple[int, Any]] = []  # (pid, connection)

    def take(self, pid: int) -> Any:
        """Return a kept connection, or a fresh one from the pool if none is free."""
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        if idle is not None and idle[0] == pid:
            return idle[1]
        return self._pool.get_connection()  # none kept, or inherited across fork

    def give(self, pid: int, conn: Any) -> None:
        """Keep `conn` for a later deferred call (or return it to the pool)."""
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append((pid, conn))
                return
        self._pool.release(conn)

    def drop(self, conn: Any) -> None:
        """Disconnect `conn` after a transport error and return it to the pool."""
        conn.disconnect()
        self._pool.release(conn)

    def disconnect(self) -> None:
        """Close the kept connections (still kept: each reconnects when next taken)."""
        pid = os.getpid()
        with self._lock:
            kept = [conn for owner, conn in self._idle if owner == pid]
        for conn in kept:
            conn.disconnect()


class NodePending:
    """One replayable engine call sent on a side connection; `reply()` reads it once."""

    __slots__ = ("_channel", "_argv", "_command", "_conn", "_pid")

    def __init__(self, channel: NodeChannel, argv: Sequence[str]) -> None:
        self._channel = channel
        self._argv = tuple(argv)
        self._command = channel.invoker.command(self._argv)
        self._pid = os.getpid()
        try:
            channel.prepare(self._command)
        except QlessConnectionError:
            self._conn: Any = None  # reply() sends it through invoke, which loads it first
            return
        side = channel._side
        conn = side.take(self._pid)
        try:
            send(conn, self._command)
        except UnicodeEncodeError as exc:
            side.give(self._pid, conn)  # raised while packing: nothing was sent
            raise utf8_error(exc) from None
        except TRANSPORT_ERRORS:
            side.drop(conn)
            conn = None  # reply() sends it again: the attempt token makes that safe
        self._conn = conn

    def reply(self) -> Any:
        """Read the raw reply; after a lost reply, send the call again (it is replayable)."""
        channel = self._channel
        conn, self._conn = self._conn, None
        if conn is None:
            return channel.invoke(self._argv)  # the send failed, or read already: send again
        side = channel._side
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:
            side.give(self._pid, conn)
            if channel.invoker.missing(exc, self._command):
                channel.recover(exc, self._command)  # the engine was not loaded: nothing ran
                return channel.invoke(self._argv)
            raise error_from_reply(exc) from exc
        except TRANSPORT_ERRORS:
            side.drop(conn)
            # The reply was lost: the repeat gets what the first call did (attempt token).
            return channel.invoke(self._argv)
        except BaseException:
            side.drop(conn)  # interrupted mid-reply: what is left on it is unknown
            raise
        side.give(self._pid, conn)
        return reply
