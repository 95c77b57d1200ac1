"""A pull-style reader of the engine's log channel of one or more keyspaces, for streaming
responses."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .engine.pubsub import MESSAGE_TYPES, Hub, Subscription, poll_readable

if TYPE_CHECKING:
    from .client import Client

__all__ = ["LogFeed"]


class LogFeed:
    """Subscribe to the log channel of every keyspace given (the shards of an alias: one
    connection per node, engine/pubsub.py) and hand out their events one `next()` at a time,
    merged in the order they arrive, each a shard's labelled with `"shard"`.

    Unlike `Events` there is no thread: the caller's loop (a streaming HTTP response) pulls,
    so it can interleave keep-alives and stop at its own deadline. Use as a context manager.
    A connection lost, or a shard's slot moved away, raises ConnectionError from `next()`:
    the caller opens a new feed (events published in between are lost).
    """

    def __init__(self, clients: Client | Sequence[Client]) -> None:
        self._clients = list(clients) if isinstance(clients, Sequence) else [clients]
        self._hub = Hub()
        self._subs = [Subscription(c, self._hub) for c in self._clients]
        self._turn = 0  # which subscription is read first (no shard starves the others)

    def open(self, timeout: float = 5.0) -> bool:
        """Subscribe; wait up to `timeout` s for every confirmation and return whether all
        came."""
        pending = {id(sub): sub.subscribe([sub.keyspace.channel("log")]) for sub in self._subs}
        early: dict[int, list[dict[str, Any]]] = {id(sub): [] for sub in self._subs}
        deadline = time.monotonic() + timeout
        # Wait for the confirmations so no event published after open() returns is missed.
        while any(pending.values()) and time.monotonic() < deadline:
            for sub in self._subs:
                while pending[id(sub)] and (msg := sub.get(timeout=0.0)) is not None:
                    if Subscription.confirms(msg):
                        pending[id(sub)] -= 1
                    else:
                        early[id(sub)].append(msg)  # an event: kept for next()
            if any(pending.values()):
                self._wait(min(0.5, max(0.0, deadline - time.monotonic())))
        for sub in self._subs:
            sub.inbox.extendleft(reversed(early[id(sub)]))
        return not any(pending.values())

    def next(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """Return the next event's JSON object, or None if none came within `timeout` s."""
        deadline = time.monotonic() + timeout
        while True:
            subs = self._subs[self._turn:] + self._subs[:self._turn]
            self._turn = (self._turn + 1) % len(self._subs)
            for sub in subs:
                msg = sub.get(timeout=0.0)
                while msg is not None and msg.get("type") not in MESSAGE_TYPES:
                    msg = sub.get(timeout=0.0)
                if msg is not None:
                    return self._decode(sub, msg)
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._wait(left)

    def _wait(self, timeout: float) -> None:
        """Block until a connection has data (or `timeout`)."""
        if any(sub.buffered() for sub in self._subs):
            return
        fds = list({fd for sub in self._subs if (fd := sub.fileno()) is not None})
        if fds:
            poll_readable(fds, timeout)
        else:
            time.sleep(timeout)

    @staticmethod
    def _decode(sub: Subscription, msg: dict[str, Any]) -> dict[str, Any] | None:
        try:
            payload = json.loads(msg["data"])
        except (TypeError, ValueError):
            return None
        if not isinstance(payload, dict):
            return None
        if sub.client.shard is not None:
            payload["shard"] = sub.client.shard
        return payload

    def close(self) -> None:
        """Unsubscribe and close the connections."""
        for sub in self._subs:
            sub.close()
        self._hub.close()

    def __enter__(self) -> LogFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
