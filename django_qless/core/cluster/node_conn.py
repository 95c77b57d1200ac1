"""One pub/sub connection to a server node, shared by the views of the keyspaces it holds
(node_pubsub.py): commands sent and waiting for their replies, replies routed to views.

Commands go out through redis-py's connection; replies are read here, straight from the
socket into a hiredis reader of our own: a pushed message (a handed job on an idle worker's
path to its job) costs one `poll` and one `recv`, not redis-py's per-reply checks and the
socket-timeout changes around each read.
"""

from __future__ import annotations

import select
import time
from collections import deque
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import hiredis
import redis

if TYPE_CHECKING:
    from .node_pubsub import Hub, Subscription

__all__ = ["CONFIRMS", "MESSAGE_TYPES", "NodeConnection", "PUBSUB_ERRORS", "Sent"]

MESSAGE_TYPES = frozenset({"message", "pmessage", "smessage"})
CONFIRMS = frozenset({"subscribe", "psubscribe", "ssubscribe"})
_UNSUBSCRIBES = frozenset({"unsubscribe", "punsubscribe", "sunsubscribe"})
# hiredis raises TypeError/AttributeError on a socket closed under it.
PUBSUB_ERRORS = (redis.RedisError, OSError, ValueError, TypeError, AttributeError,
                 hiredis.HiredisError)
_CHUNK = 65536  # bytes read per recv (a handed job is one message, usually < 2 kB)
# How long the rest of a reply read in part may take to arrive before the read gives up
# for now (the next read resumes it).
_REST_WITHIN = 1.0
_READABLE = select.POLLIN | select.POLLERR | select.POLLHUP


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
        self.ping_at = 0.0  # when an unanswered PING of `probe` was sent (0: none)
        # Replies are read here (see the module docstring); redis-py's parser has read
        # nothing past the replies of its handshake and of `Hub._open`'s INFO (if sent),
        # so its buffer is empty.
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
        """Read and route replies: wait up to `timeout` for the first, then route every
        reply read; read on (waiting only for the rest of a reply read in part) until
        `until` has something to hand out."""
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
        """Tell whether bytes were received that `poll()` on the socket will not report
        (decrypted TLS data waiting in the socket object)."""
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
        if kind == "pmessage":
            msg = {"type": kind, "pattern": reply[1], "channel": reply[2], "data": reply[3]}
            view = self.routes.get(str(reply[1]))
        else:
            msg = {"type": kind, "pattern": None, "channel": reply[1], "data": reply[2]}
            view = self.routes.get(str(reply[1]))
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
        self.hub.forget(self)
        try:
            self.conn.disconnect()
        except Exception:  # noqa: S110 - closing a broken socket may fail; nothing to do
            pass

    def close(self) -> None:
        """Close the connection (its last view left)."""
        self.broken = True
        self.hub.forget(self)
        try:
            self.conn.disconnect()
        except Exception:  # noqa: S110 - closing a broken socket may fail; nothing to do
            pass
