"""A pull-style reader of the engine's log channel, for streaming responses."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .client import Client

__all__ = ["LogFeed"]


class LogFeed:
    """Subscribe to the log channel and hand out its events one `next()` at a time.

    Unlike `Events` there is no thread: the caller's loop (a streaming HTTP response) pulls,
    so it can interleave keep-alives and stop at its own deadline. Use as a context manager.
    """

    def __init__(self, client: Client) -> None:
        # The keyspace's server (a shard's primary, where its sharded channels are published).
        self._pubsub: Any = client.node_redis().pubsub()  # type: ignore[no-untyped-call]
        self._client = client
        self._channel = client.keyspace.channel("log")

    def open(self, timeout: float = 5.0) -> bool:
        """Subscribe; wait up to `timeout` s for the confirmation and return whether it came."""
        # A shard's log channel is a sharded channel on Redis 7+ (keyspace.py).
        ks = self._client.keyspace
        if ks.sharded and ks.uses_sharded_pubsub(self._client.server_major()):
            self._pubsub.ssubscribe(self._channel)
        else:
            self._pubsub.subscribe(self._channel)
        started = time.monotonic()
        # Wait for the confirmation so no event published after open() returns is missed.
        while time.monotonic() - started < timeout:
            msg = self._pubsub.get_message(timeout=0.5)
            if msg is not None and msg.get("type") in ("subscribe", "ssubscribe"):
                return True
        return False

    def next(self, timeout: float = 1.0) -> dict[str, Any] | None:
        """Return the next event's JSON object, or None if none came within `timeout` s."""
        msg = self._pubsub.get_message(timeout=timeout)
        if msg is None or msg.get("type") not in ("message", "smessage"):
            return None
        try:
            payload = json.loads(msg["data"])
        except (TypeError, ValueError):
            return None
        return payload if isinstance(payload, dict) else None

    def close(self) -> None:
        """Unsubscribe and give the connection back."""
        self._pubsub.close()

    def __enter__(self) -> LogFeed:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
