"""One pub/sub connection to the server holding one keyspace: a shard's primary, or the node.

A shard's channels are sharded channels on Redis/Valkey 7+ (the engine SPUBLISHes them):
they are heard only on the primary owning the shard's slot, with SSUBSCRIBE, and every
channel of one SSUBSCRIBE must be in one slot (a shard's channels all are). The primary is
looked up when the connection is opened (the cluster map is read again if the node found is
no primary any more), so reopening after an error follows a failover.
When the slot moves away (failover, resharding) the server drops the subscription with an
`sunsubscribe` we did not ask for: that is reported as a lost connection, so the owner
reopens on the new primary. Plain channels (the default keyspace, servers before 7) work as
they always did, patterns included.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["MESSAGE_TYPES", "PUBSUB_ERRORS", "Subscription"]

MESSAGE_TYPES = frozenset({"message", "pmessage", "smessage"})
_CONFIRMS = frozenset({"subscribe", "psubscribe", "ssubscribe"})
# hiredis raises TypeError/AttributeError on a socket closed under it.
PUBSUB_ERRORS = (redis.RedisError, OSError, ValueError, TypeError, AttributeError)


class Subscription:
    """A pubsub on `client`'s keyspace: (S)SUBSCRIBE as the server needs, loss detected."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.keyspace = client.keyspace
        # Decided when first connected: a shard on Redis 7+ uses sharded channels.
        self.sharded: bool | None = None if client.keyspace.sharded else False
        self.channels: set[str] = set()
        self.patterns: set[str] = set()
        self._pubsub: Any = None

    def __repr__(self) -> str:
        return f"<Subscription {self.keyspace.prefix} {sorted(self.channels)}>"

    @property
    def connected(self) -> bool:
        """Tell whether a connection is open."""
        return self._pubsub is not None

    def connect(self) -> None:
        """Open a fresh connection to the keyspace's server now (a shard's current primary)."""
        self.close()
        node = self.client.node_redis()
        if self.keyspace.sharded and _role(node) != "master":
            # Our map of the cluster predates a failover (this process made no call that
            # would have told it): read the map again, then ask for the primary once more.
            transport = getattr(self.client.channel, "transport", None)
            if transport is not None:
                transport.refresh()
            node = self.client.node_redis()
            if _role(node) != "master":  # the cluster has not agreed yet: try again later
                raise redis.ConnectionError("the shard has no primary in the map yet")
        if self.sharded is None:
            version = str(node.info("server").get("redis_version", "0"))
            self.sharded = self.keyspace.uses_sharded_pubsub(int(version.split(".")[0]))
        # Messages as they come: redis-py's default RESP3 push handler formats each one (a
        # whole handed job) for a debug log line, even with debug logging off.
        self._pubsub = node.pubsub(push_handler_func=_as_is)  # type: ignore[no-untyped-call, unused-ignore]

    def subscribe(self, channels: Iterable[str], patterns: Iterable[str] = ()) -> int:
        """Subscribe (connecting first if needed); return the confirmations to expect."""
        channels = sorted(set(channels) - self.channels)
        patterns = sorted(set(patterns) - self.patterns)
        if self._pubsub is None:
            self.connect()
        pubsub = self._pubsub
        if channels:
            if self.sharded:
                pubsub.ssubscribe(*channels)
            else:
                pubsub.subscribe(*channels)
            self.channels.update(channels)
        if patterns:
            if self.sharded:
                raise ValueError("sharded channels cannot be subscribed by pattern")
            pubsub.psubscribe(*patterns)
            self.patterns.update(patterns)
        return len(channels) + len(patterns)

    def unsubscribe(self, channels: Iterable[str]) -> None:
        """Stop listening on `channels`."""
        channels = sorted(set(channels) & self.channels)
        self.channels.difference_update(channels)
        if not channels or self._pubsub is None:
            return
        if self.sharded:
            self._pubsub.sunsubscribe(*channels)
        else:
            self._pubsub.unsubscribe(*channels)

    def get(self, timeout: float = 0.0) -> dict[str, Any] | None:
        """Return the next message (confirmations included), or None; raise ConnectionError
        when the server dropped a channel we still want (its slot moved away)."""
        if self._pubsub is None:
            return None
        msg: dict[str, Any] | None = self._pubsub.get_message(timeout=timeout)
        if msg is not None and msg.get("type") == "sunsubscribe":
            if str(msg.get("channel")) in self.channels:
                raise redis.ConnectionError("the shard's slot moved: its channels were dropped")
        return msg

    @staticmethod
    def confirms(msg: dict[str, Any]) -> bool:
        """Tell whether `msg` confirms a subscription."""
        return msg.get("type") in _CONFIRMS

    def fileno(self) -> int | None:
        """Return the socket to poll, if connected."""
        conn = getattr(self._pubsub, "connection", None)
        sock = getattr(conn, "_sock", None)
        return None if sock is None else int(sock.fileno())

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the socket will not report again."""
        conn = getattr(self._pubsub, "connection", None)
        try:
            return bool(conn is not None and conn.can_read(timeout=0))
        except PUBSUB_ERRORS:
            return True

    def ping(self) -> None:
        """Probe the connection (a half-open socket delivers nothing and raises nothing)."""
        if self._pubsub is not None:
            self._pubsub.ping()

    def close(self) -> None:
        """Drop the connection and forget the channels (messages sent now are lost)."""
        pubsub, self._pubsub = self._pubsub, None
        self.channels.clear()
        self.patterns.clear()
        if pubsub is not None:
            try:
                pubsub.close()
            except Exception:  # noqa: S110 - closing a broken socket may fail; nothing to do
                pass


def _role(node: Any) -> str:
    """Return the node's replication role ("master" for a primary)."""
    return str(node.execute_command("ROLE")[0])


def _as_is(response: Any) -> Any:
    """Return a pushed pub/sub message unchanged (redis-py's push handler hook)."""
    return response
