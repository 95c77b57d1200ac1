"""Pub/sub over one connection per server node, shared by every keyspace that node holds.

A shard's channels are sharded channels on Redis/Valkey 7+ (the engine SPUBLISHes them):
they are heard only on the primary owning the shard's slot, with SSUBSCRIBE, and the
channels of one SSUBSCRIBE must share one slot. A `Hub` keeps one connection per primary;
each keyspace subscribed through it is a `Subscription` (a view) that sends its own
SSUBSCRIBE (one slot per command) on its node's connection, so a worker serving 16 shards on
3 primaries holds 3 connections, not 16. Replies are routed back to the view by channel
name (every channel name carries its keyspace's prefix); an error reply goes to the view
whose command is oldest unanswered on that connection.

When a slot moves away (resharding, a failover) the server drops that slot's channels
with an `sunsubscribe` nobody asked for: only the view of that shard is told (its `get`
raises ConnectionError), and it reopens on the slot's new primary (the slot map is read
again first); the other shards on the connection keep listening. A connection that breaks
tells every view on it. Plain channels (the default keyspace, servers before 7) work as
they always did, patterns included.

A hub is used by one thread (the worker loop, the supervisor, one listener thread).
"""

from __future__ import annotations

import select
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .node_conn import CONFIRMS, MESSAGE_TYPES, PUBSUB_ERRORS, NodeConnection

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["Hub", "MESSAGE_TYPES", "PUBSUB_ERRORS", "Subscription"]

_TIMEOUT = 10.0  # bound on every blocking read or connect of a node connection

# Our pub/sub connections send no CLIENT SETINFO: its reply is one more round trip on every
# (re)connect, before an idle child that reconnects can listen (redis-py 5-7 take lib_name
# and lib_version None; later ones a `driver_info` of None, and warn about the other two).
try:
    from redis.driver_info import DriverInfo  # noqa: F401 - only its presence matters

    _NO_SETINFO: dict[str, Any] = {"driver_info": None}
except ImportError:  # pragma: no cover - redis-py before driver_info
    _NO_SETINFO = {"lib_name": None, "lib_version": None}


class Hub:
    """The pub/sub connections of one consumer: one per server node, shared by views."""

    def __init__(self) -> None:
        self._nodes: dict[str, NodeConnection] = {}
        self._stale: set[str | None] = set()  # shards whose slot map must be read again

    def __repr__(self) -> str:
        return f"<Hub {sorted(self._nodes)}>"

    def subscription(self, client: Client) -> Subscription:
        """Return a new view for `client`'s keyspace on this hub's connections."""
        return Subscription(client, self)

    def connections(self) -> int:
        """Return how many node connections are open."""
        return len(self._nodes)

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
        channel: Any = client.channel
        transport = getattr(channel, "transport", None)
        stale = client.shard in self._stale
        if transport is not None and stale:
            transport.refresh()  # no node answering: the lookup below fails, we retry
        node_redis = client.node_redis()
        address = channel.node() if transport is not None else f"pool:{id(node_redis)}"
        node = self._nodes.get(address)
        if transport is not None and (stale or node is None) and _role(node_redis) != "master":
            # Our map predates a failover (a replica also takes SSUBSCRIBE, and would hear
            # its primary's messages only while it stays its replica): read it again.
            transport.refresh()
            node_redis = client.node_redis()
            address = channel.node()
            node = self._nodes.get(address)
            if _role(node_redis) != "master":  # the cluster has not agreed yet: try later
                raise redis.ConnectionError("the shard has no primary in the map yet")
        self._stale.discard(client.shard)
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

    def probe(self, interval: float) -> None:
        """PING every connection quiet for `interval` s; one whose PING went unanswered for
        `interval` s is broken (a half-open socket delivers nothing and raises nothing)."""
        now = time.monotonic()
        for node in list(self._nodes.values()):
            if node.ping_at and now - node.ping_at > interval:
                node.fail(redis.TimeoutError(f"no PONG within {interval}s (half-open socket?)"))
            elif not node.ping_at and now - node.heard >= interval:
                try:
                    node.send(None, "PING", [])
                except PUBSUB_ERRORS:
                    continue  # marked broken: its views reopen
                node.ping_at = now

    def close(self) -> None:
        """Close every connection."""
        for node in list(self._nodes.values()):
            for view in list(node.views):
                view.close()
            node.close()


class Subscription:
    """The channels of one keyspace, on the connection its hub keeps to the keyspace's
    server (a shard's current primary): (S)SUBSCRIBE as the server needs, loss detected.

    Without a hub it has a connection of its own.
    """

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


def _role(node_redis: Any) -> str:
    """Return the node's replication role ("master" for a primary)."""
    return str(node_redis.execute_command("ROLE")[0])


def poll_readable(fds: list[int], timeout: float) -> set[int]:
    """Wait until one of `fds` is readable; return the readable ones."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        events = poller.poll(timeout * 1000.0)
    except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
        return set()
    return {fd for fd, _ in events}
