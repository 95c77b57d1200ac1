"""The engine's events of every shard of a deployment, in one thread on one connection per
node (engine/pubsub.py)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from ..engine.pubsub import (
    MESSAGE_TYPES,
    PUBSUB_ERRORS,
    Hub,
    Subscription,
    block_async_signals,
    poll_readable,
)
from ..events import EVENT_NAMES, ListenerThread, decode_event
from ..exceptions import QlessConnectionError

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["ShardCallback", "ShardEvents"]

logger = logging.getLogger("django_qless")

#: Called with the event dict and the client of the shard it came from.
ShardCallback = Callable[[dict[str, Any], "Client"], object]


class ShardEvents:
    """Listen to the event channels of every keyspace given, in a thread, and call a callback
    per event with the shard it came from.

    Like `events.Events` (one keyspace), but the keyspaces of one primary share a connection.
    `start()` returns once every shard is subscribed. A shard whose subscription is lost (its
    connection broke, its slot moved, a PING went unanswered for `health_check_interval`)
    subscribes again on its primary of now, with back-off; the others listen on. Events
    published meanwhile are lost: events are advisory, job state is the authority.
    """

    def __init__(self, clients: Sequence[Client], *, health_check_interval: float = 10.0,
                 max_backoff: float = 5.0) -> None:
        self.clients = list(clients)
        self.health_check_interval = health_check_interval
        self.max_backoff = max_backoff
        self._callbacks: list[ShardCallback] = []
        self._life = ListenerThread(self._run)
        self._stop, self._listening = self._life.stop_flag, self._life.listening
        self.connects = 0  # shard subscriptions confirmed, first ones included

    def on(self, callback: ShardCallback) -> ShardCallback:
        """Call `callback(event, shard_client)` for every event; return it."""
        self._callbacks.append(callback)
        return callback

    @property
    def listening(self) -> bool:
        """Return whether every shard's subscription is confirmed now."""
        return self._listening.is_set()

    def start(self, timeout: float = 10.0) -> ShardEvents:
        """Start the thread; return once subscribed (QlessConnectionError after `timeout`)."""
        if not self._life.start(timeout):
            raise QlessConnectionError(f"could not subscribe to every shard in {timeout}s")
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the thread and close its connections."""
        self._life.stop(timeout)

    def _dispatch(self, event: dict[str, Any], client: Client) -> None:
        for callback in list(self._callbacks):
            try:
                callback(event, client)
            except Exception:
                logger.exception("qless event callback %r failed on %r", callback, event)

    def _run(self) -> None:
        block_async_signals()
        hub = Hub()
        subs = [Subscription(c, hub) for c in self.clients]
        pending = [0] * len(subs)  # confirmations still awaited, per shard
        retry_at = [0.0] * len(subs)
        backoff = [0.05] * len(subs)
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                for i, sub in enumerate(subs):
                    if not sub.connected and now >= retry_at[i]:
                        try:
                            names = [sub.keyspace.channel(n) for n in EVENT_NAMES]
                            pending[i] = sub.subscribe(names)
                        except PUBSUB_ERRORS as exc:
                            self._lost(sub, exc, i, retry_at, backoff)
                if all(sub.connected for sub in subs) and not any(pending):
                    self._listening.set()
                else:
                    self._listening.clear()
                if not any(sub.buffered() for sub in subs):
                    fds = list({fd for sub in subs if (fd := sub.fileno()) is not None})
                    if fds:
                        poll_readable(fds, 0.25)
                    else:
                        self._stop.wait(0.05)
                for i, sub in enumerate(subs):
                    try:
                        while (msg := sub.get(timeout=0.0)) is not None:
                            if Subscription.confirms(msg):
                                pending[i] -= 1
                                if pending[i] == 0:
                                    self.connects += 1
                                    backoff[i] = 0.05
                            elif msg["type"] in MESSAGE_TYPES:
                                self._dispatch(decode_event(str(msg["channel"]),
                                                            str(msg["data"]),
                                                            sub.keyspace.prefix), sub.client)
                    except PUBSUB_ERRORS as exc:
                        self._lost(sub, exc, i, retry_at, backoff)
                _probe(hub, self.health_check_interval)
            self._drain(subs)
        finally:
            self._listening.clear()
            for sub in subs:
                sub.close()
            hub.close()

    def _drain(self, subs: list[Subscription], grace: float = 0.05) -> None:
        """On stop, deliver what already arrived (or arrives within `grace` seconds)."""
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            for sub in subs:
                try:
                    while (msg := sub.get(timeout=0.0)) is not None:
                        if msg["type"] in MESSAGE_TYPES:
                            self._dispatch(decode_event(str(msg["channel"]), str(msg["data"]),
                                                        sub.keyspace.prefix), sub.client)
                except PUBSUB_ERRORS:
                    continue
            fds = list({fd for sub in subs if (fd := sub.fileno()) is not None})
            if fds:
                poll_readable(fds, max(0.0, deadline - time.monotonic()))

    def _lost(self, sub: Subscription, exc: BaseException, i: int, retry_at: list[float],
              backoff: list[float]) -> None:
        """Close a lost shard's subscription; it is made again after its back-off."""
        self._listening.clear()
        if not self._stop.is_set():
            logger.warning("qless events: %s lost (%s); resubscribing in %.2fs",
                           sub.keyspace.prefix, exc, backoff[i])
        sub.close()
        retry_at[i] = time.monotonic() + backoff[i]
        backoff[i] = min(backoff[i] * 2, self.max_backoff)


def _probe(hub: Hub, interval: float) -> None:
    """PING every connection quiet for `interval` s; one whose PING went unanswered for
    `interval` s is broken (a half-open socket delivers nothing and raises nothing)."""
    now = time.monotonic()
    for node in hub.nodes():
        if node.ping_at and now - node.ping_at > interval:
            node.fail(redis.TimeoutError(f"no PONG within {interval}s (half-open socket?)"))
        elif not node.ping_at and now - node.heard >= interval:
            try:
                node.send(None, "PING", [])
            except PUBSUB_ERRORS:
                continue  # marked broken: its views reopen
            node.ping_at = now
