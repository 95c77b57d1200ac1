"""Pub/sub over one connection per server node, shared by every keyspace that node holds.

A `Hub` keeps one `NodeConnection` per server (a cluster's primary); each keyspace listens
through a `Subscription` on it: plain channels, or a shard's sharded channels (SSUBSCRIBE,
one slot per command) on Redis 7+, followed when their slot moves (docs/scaling.md,
"Listening: one connection per primary"). A hub is used by one thread. Replies are read
straight from the socket into a hiredis reader: a pushed message (a handed job) costs one
`poll` and one `recv`, not redis-py's per-reply checks and socket-timeout changes.
"""

from __future__ import annotations

import select
import signal
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import hiredis
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

if TYPE_CHECKING:
    from ..client import Client

__all__ = [
    "Hub", "MESSAGE_TYPES", "NodeConnection", "PUBSUB_ERRORS", "Subscription",
    "block_async_signals", "poll_readable",
]

MESSAGE_TYPES = frozenset({"message", "pmessage", "smessage"})
CONFIRMS = frozenset({"subscribe", "psubscribe", "ssubscribe"})
_UNSUBSCRIBES = frozenset({"unsubscribe", "punsubscribe", "sunsubscribe"})
# hiredis raises TypeError/AttributeError on a socket closed under it.
PUBSUB_ERRORS = (redis.RedisError, OSError, ValueError, TypeError, AttributeError,
                 hiredis.HiredisError)
_CHUNK = 65536  # bytes read per recv (a handed job is one message, usually < 2 kB)
_REST_WITHIN = 1.0  # wait for the rest of a reply read in part (the next read resumes it)
_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP

_TIMEOUT = 10.0  # bound on every blocking read or connect of a node connection

# Our pub/sub connections send no CLIENT SETINFO: its reply is one more round trip on every
# (re)connect, before an idle child that reconnects can listen (redis-py 5-7 take lib_name
# and lib_version None; later ones a `driver_info` of None, and warn about the other two).
try:
    from redis.driver_info import DriverInfo  # noqa: F401 - only its presence matters

    _NO_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:  # pragma: no cover - redis-py before driver_info
    _NO_SETINFO = {"lib_name": None, "lib_version": None}


class Sent:
    """One command sent on a node connection and not fully answered yet."""

    __slots__ = ("sub", "left", "undo")

    def __init__(self, sub: Subscription | None, names: Iterable[str], undo: bool) -> None:
        self.sub = sub
        self.left = set(names)  # the channel names still to be confirmed ("" for a PING)
        self.undo = undo  # an unsubscribe (answered by `*unsubscribe` replies)


class NodeConnection:
    """One pub/sub connection to a server (RESP2, no silent retries) and its views."""

    def __init__(self, hub: Hub, address: str, conn: Any, major: int | None) -> None:
        self.hub = hub
        self.address = address
        self.conn = conn
        self.major = major  # the server's major version (None: not asked, nobody needed it)
        self.views: set[Subscription] = set()
        self.routes: dict[str, Subscription] = {}  # channel or pattern -> its view
        self.sent: deque[Sent] = deque()
        self.broken = False
        self.heard = time.monotonic()  # when a reply last came
        self.ping_at = 0.0  # when an unanswered health PING was sent (0: none)
        # redis-py's parser has read nothing past its handshake and `Hub._open`'s INFO (if
        # sent): its buffer is empty, and every later reply is read here.
        self.sock = conn._sock
        self._fd = self.sock.fileno()
        encoder = conn.encoder
        self._reader = (hiredis.Reader(encoding=encoder.encoding, errors=encoder.encoding_errors)
                        if encoder.decode_responses else hiredis.Reader())
        self._poller = select.poll()
        self._poller.register(self._fd, _READABLE)

    def send(self, sub: Subscription | None, command: str, names: list[str]) -> None:
        """Send one (un)subscribe command (or PING) and expect a reply per name."""
        try:
            self.conn.send_command(command, *names)
        except PUBSUB_ERRORS as exc:
            self.fail(exc)
            raise
        self.sent.append(Sent(sub, names or [""], "UNSUB" in command))

    def pump(self, timeout: float, until: Subscription) -> None:
        """Wait up to `timeout` for replies and route them; read on (waiting only for the rest
        of a reply read in part) until `until` has something to hand out."""
        if self.broken:
            return
        try:
            if not self._fill(timeout):
                return
            self.heard = time.monotonic()
            reader = self._reader
            while True:
                while (reply := reader.gets()) is not False:
                    if isinstance(reply, hiredis.ReplyError):
                        self._error_reply(redis.ResponseError(str(reply)))
                    else:
                        self._route(reply)
                if until.has_news() or self.broken:
                    return
                # A reply read in part is on its way: wait for the rest (a large handed job
                # spans several reads), else nothing more is waiting to be read.
                if not self._fill(_REST_WITHIN if reader.has_data() else 0.0):
                    return
        except PUBSUB_ERRORS as exc:
            self.fail(exc)

    def pending(self) -> bool:
        """Tell whether decrypted TLS data waits in the socket object (`poll()` misses it)."""
        pending = getattr(self.sock, "pending", None)
        return bool(pending is not None and pending())

    def _fill(self, timeout: float) -> bool:
        """Feed the reader what the socket has, waiting up to `timeout` for it; False if
        nothing came. The socket holds a timeout, so a TLS record arriving in parts cannot
        block the read for longer than that."""
        if not self.pending() and not self._poller.poll(timeout * 1000.0):
            return False
        data = self.sock.recv(_CHUNK)
        if not data:
            raise redis.ConnectionError("connection closed by the server")
        self._reader.feed(data)
        return True

    def _error_reply(self, exc: redis.ResponseError) -> None:
        """An error answers the oldest command waiting (MOVED: the slot is elsewhere now)."""
        if not self.sent:
            self.fail(exc)  # cannot tell whose: start this node afresh
            return
        sent = self.sent.popleft()
        if sent.sub is None:
            self.fail(exc)
            return
        sent.sub.lose(redis.ConnectionError(f"subscribing failed ({exc}): the shard moved?"))

    def _route(self, reply: Any) -> None:
        kind = str(reply[0]) if isinstance(reply, list) else "pong"  # PONG, unsubscribed
        if kind == "pong":
            self._answered("", undo=False)
            self.ping_at = 0.0
            return
        view = self.routes.get(str(reply[1]))
        if kind == "pmessage":
            msg = {"type": kind, "pattern": reply[1], "channel": reply[2], "data": reply[3]}
        else:
            msg = {"type": kind, "pattern": None, "channel": reply[1], "data": reply[2]}
        name = str(msg["channel"] if kind != "pmessage" else reply[2])
        if kind in CONFIRMS or kind in _UNSUBSCRIBES:
            sent = self._answered(str(reply[1]), undo=kind in _UNSUBSCRIBES)
            if sent is not None:
                asker = sent.sub
                if asker is not None and asker.attached_to(self):
                    asker.inbox.append(msg)  # the view that asked sees the answer
                    name = str(reply[1])
                    if kind in _UNSUBSCRIBES and name not in asker.channels | asker.patterns:
                        # Routed until now: messages sent before the unsubscribe still count.
                        if self.routes.get(name) is asker:
                            del self.routes[name]
                return
            if kind == "sunsubscribe" and view is not None:
                # Not asked for: the slot left this node; that shard alone resubscribes.
                view.lose(redis.ConnectionError("the shard's slot moved: its channels were "
                                                "dropped"), dropped=True)
            return
        if view is not None and kind in MESSAGE_TYPES and name:
            view.inbox.append(msg)

    def _answered(self, name: str, undo: bool) -> Sent | None:
        """Match a reply naming `name` with the oldest command of its kind expecting it."""
        for sent in self.sent:
            if sent.undo == undo and name in sent.left:
                sent.left.discard(name)
                while self.sent and not self.sent[0].left:
                    self.sent.popleft()
                return sent
        return None

    def fail(self, exc: BaseException) -> None:
        """Mark the connection dead: every view on it is told, and reopens."""
        if self.broken:
            return
        self.broken = True
        for view in list(self.views):
            view.lose(redis.ConnectionError(f"pub/sub connection to {self.address} lost "
                                            f"({type(exc).__name__}: {exc})"))
        self.close()

    def close(self) -> None:
        """Close the connection (its last view left)."""
        self.broken = True
        self.hub.forget(self)
        try:
            self.conn.disconnect()
        except Exception:  # noqa: S110 - closing a broken socket may fail; nothing to do
            pass


class Hub:
    """The pub/sub connections of one consumer: one per server node, shared by views."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeConnection] = {}
        self._stale: set[str | None] = set()  # shards whose slot map must be read again

    def __repr__(self) -> str:
        return f"<Hub {sorted(self._nodes)}>"

    def nodes(self) -> list[NodeConnection]:
        """Return the open node connections."""
        return list(self._nodes.values())

    def forget(self, node: NodeConnection) -> None:
        """Drop `node` from the open connections (it broke or was closed)."""
        if self._nodes.get(node.address) is node:
            del self._nodes[node.address]

    def mark_stale(self, client: Client) -> None:
        """Read the slot map again before `client`'s shard is next looked up."""
        self._stale.add(client.shard)

    def attach(self, view: Subscription) -> NodeConnection:
        """Return the open connection to the node holding `view`'s keyspace now."""
        try:
            # A view yet to choose its channels' kind needs the server's major version.
            node = self._find(view.client, need_major=view.sharded is None)
        except PUBSUB_ERRORS:
            self._stale.add(view.client.shard)  # look the map up again next time
            raise
        node.views.add(view)
        return node

    def _find(self, client: Client, need_major: bool = True) -> NodeConnection:
        """Return the connection to `client`'s server now, opening it if needed."""
        address, node_redis = client.channel.pubsub_node(client.shard in self._stale, self._nodes)
        self._stale.discard(client.shard)
        node = self._nodes.get(address)
        if node is None or node.broken:
            node = self._nodes[address] = self._open(address, node_redis, need_major)
        elif need_major and node.major is None:
            node.major = _server_major(node_redis)
        return node

    def _open(self, address: str, node_redis: Any, need_major: bool = True) -> NodeConnection:
        """Open a connection to `node_redis`'s server; ask its version only if `need_major`."""
        pool = node_redis.connection_pool
        # redis-py 8 adds maintenance-notification settings to TCP pools; they need RESP3,
        # and this connection speaks RESP2, so leave them out.
        kwargs = {key: value for key, value in pool.connection_kwargs.items()
                  if not key.startswith(("maint_notifications", "maintenance",
                                         "oss_cluster_maint"))}
        for key in ("lib_name", "lib_version", "driver_info"):
            kwargs.pop(key, None)
        kwargs.update(retry=Retry(NoBackoff(), 0), protocol=2, health_check_interval=0,
                      **_NO_SETINFO)
        for key in ("socket_timeout", "socket_connect_timeout"):
            if kwargs.get(key) is None:
                kwargs[key] = _TIMEOUT  # a dead peer cannot hang a read
        conn = pool.connection_class(**kwargs)
        conn.connect()
        major = None
        if need_major:
            try:
                conn.send_command("INFO", "server")
                major = _major(str(conn.read_response()))
            except BaseException:
                conn.disconnect()
                raise
        return NodeConnection(self, address, conn, major)

    def close(self) -> None:
        """Close every connection."""
        for node in self.nodes():
            for view in list(node.views):
                view.close()
            node.close()


class Subscription:
    """The channels of one keyspace on its hub's connection to the keyspace's server (a
    shard's current primary; without a hub, a connection of its own)."""

    def __init__(self, client: Client, hub: Hub | None = None) -> None:
        self.client = client
        self.keyspace = client.keyspace
        self.hub = hub if hub is not None else Hub()
        # Decided when first connected: a shard on Redis 7+ uses sharded channels.
        self.sharded: bool | None = None if client.keyspace.sharded else False
        self.channels: set[str] = set()
        self.patterns: set[str] = set()
        self.inbox: deque[dict[str, Any]] = deque()
        self._node: NodeConnection | None = None
        self._lost: BaseException | None = None
        self._dropped = False  # the server dropped our channels (the slot moved)

    def __repr__(self) -> str:
        return f"<Subscription {self.keyspace.prefix} {sorted(self.channels)}>"

    @property
    def connected(self) -> bool:
        """Tell whether a connection is open (a loss not yet reported counts as open)."""
        return self._node is not None

    def connect(self) -> None:
        """Attach to the connection of the keyspace's server now (a shard's primary)."""
        self.close()
        node = self.hub.attach(self)
        self._node = node
        if self.sharded is None:  # (the hub asked the server's version for us: attach)
            self.sharded = self.keyspace.uses_sharded_pubsub(node.major or 0)

    def subscribe(self, channels: Iterable[str], patterns: Iterable[str] = ()) -> int:
        """Subscribe (connecting first if needed); return the confirmations to expect."""
        channels = sorted(set(channels) - self.channels)
        patterns = sorted(set(patterns) - self.patterns)
        if self._node is None:
            self.connect()
        node = self._node
        assert node is not None
        if node.broken:
            raise self._lost or redis.ConnectionError("pub/sub connection lost")
        if patterns and self.sharded:
            raise ValueError("sharded channels cannot be subscribed by pattern")
        for names, command in ((channels, "SSUBSCRIBE" if self.sharded else "SUBSCRIBE"),
                               (patterns, "PSUBSCRIBE")):
            if names:
                for name in names:
                    node.routes[name] = self
                node.send(self, command, names)
        self.channels.update(channels)
        self.patterns.update(patterns)
        return len(channels) + len(patterns)

    def unsubscribe(self, channels: Iterable[str]) -> None:
        """Stop listening on `channels`."""
        channels = sorted(set(channels) & self.channels)
        self.channels.difference_update(channels)
        node = self._node
        if not channels or node is None or node.broken or self._lost is not None:
            return
        node.send(self, "SUNSUBSCRIBE" if self.sharded else "UNSUBSCRIBE", channels)

    def attached_to(self, node: NodeConnection) -> bool:
        """Tell whether this view listens on `node` now."""
        return self._node is node

    def has_news(self) -> bool:
        """Tell whether `get` has something to return without reading (or a loss to raise)."""
        return bool(self.inbox) or self._lost is not None

    def lose(self, exc: BaseException, dropped: bool = False) -> None:
        """Note that this view's channels are gone (reported by the next `get`)."""
        if self._lost is None:
            self._lost = exc
        self._dropped = self._dropped or dropped
        self.hub.mark_stale(self.client)

    def get(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """Return the next message (confirmations included), or None; raise ConnectionError
        when the connection broke or the server dropped our channels (the slot moved)."""
        node = self._node
        if node is None:
            return None
        if not self.has_news():
            node.pump(timeout, self)
        if self.inbox:
            return self.inbox.popleft()
        if self._lost is not None:
            raise self._lost
        return None

    @staticmethod
    def confirms(msg: dict[str, Any]) -> bool:
        """Tell whether `msg` confirms a subscription."""
        return msg.get("type") in CONFIRMS

    def fileno(self) -> int | None:
        """Return the socket to poll, if connected."""
        node = self._node
        return None if node is None or node.broken else int(node.sock.fileno())

    def buffered(self) -> bool:
        """Tell whether there is something to `get` the socket will not report again."""
        if self.has_news():
            return True
        node = self._node
        if node is None or node.broken:
            return False
        # Every reply read is routed at once (NodeConnection.pump): what is left is on the
        # socket, which poll() reports, or decrypted TLS data the socket object holds.
        return node.pending()

    def ping(self) -> None:
        """Probe the connection (a half-open socket delivers nothing and raises nothing)."""
        node = self._node
        if node is not None and not node.broken:
            node.send(None, "PING", [])

    def close(self) -> None:
        """Leave the connection and forget the channels (messages sent now are lost)."""
        node, self._node = self._node, None
        channels, patterns = sorted(self.channels), sorted(self.patterns)
        self.channels.clear()
        self.patterns.clear()
        self.inbox.clear()
        lost, dropped, self._lost, self._dropped = self._lost, self._dropped, None, False
        if node is None:
            return
        node.views.discard(self)
        for name in (*channels, *patterns):
            if node.routes.get(name) is self:
                del node.routes[name]
        if node.broken:
            return
        if not node.views:
            node.close()  # nobody else listens there: no need to unsubscribe
            return
        try:
            if channels and not dropped and lost is None:
                node.send(None, "SUNSUBSCRIBE" if self.sharded else "UNSUBSCRIBE", channels)
            if patterns:
                node.send(None, "PUNSUBSCRIBE", patterns)
        except PUBSUB_ERRORS:
            pass  # the node is marked broken: its other views reopen


def _major(info: str) -> int:
    """Return the server's major version from its `INFO server` reply."""
    version = next((line.split(":", 1)[1] for line in info.splitlines()
                    if line.startswith("redis_version:")), "0")
    return int(version.split(".")[0] or 0)


def _server_major(node_redis: Any) -> int:
    """Return the major version of the server `node_redis` talks to (one INFO call)."""
    info = node_redis.execute_command("INFO", "server")
    if isinstance(info, dict):  # (redis-py parses the reply of a client's INFO)
        return int(str(info.get("redis_version", "0")).split(".")[0] or 0)
    return _major(str(info))


def poll_readable(fds: list[int], timeout: float) -> set[int]:
    """Wait until one of `fds` is readable; return the readable ones."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, _READABLE)
    return {fd for fd, _ in poller.poll(timeout * 1000.0)}


# Raised by a thread's own fault: blocking them would hide a crash in that thread.
_SYNCHRONOUS = frozenset({
    signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT,
    signal.SIGTRAP, signal.SIGSYS, signal.SIGKILL, signal.SIGSTOP,
})


def block_async_signals() -> None:
    """Block every asynchronous signal in the calling helper thread (call it first in `run`).

    Linux delivers a process-directed signal (TERM, QUIT, the parent-death signal) to any
    thread not blocking it, and only that thread's blocking call is interrupted: taken by a
    helper thread, it would wait until the main thread's job left its `time.sleep(3)`.
    """
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _SYNCHRONOUS)
