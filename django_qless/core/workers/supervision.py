"""What the supervisor tracks per child, and its `ql:w:<child>` channels (no thread).

No thread: the supervisor forks, and forking a multi-threaded process invites deadlocks in
the child. The pubsub socket is polled with the other descriptors instead; the connection is
re-created (and every channel re-subscribed) when it breaks, and pinged when quiet so a
half-open socket is noticed.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import redis

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ChildChannels", "ChildProc", "attempts_still_owned"]

log = logging.getLogger("django_qless.worker")

_PREFIX = "ql:w:"


@dataclass
class ChildProc:
    """What the supervisor knows about one child."""

    slot: int
    pid: int
    name: str
    status_fd: int
    started: float = field(default_factory=time.monotonic)
    jid: str | None = None
    token: str | None = None  # the attempt token of `jid`'s pop (see attempts_still_owned)
    klass: str | None = None
    queue: str | None = None
    job_started: float = 0.0
    kill_reason: str | None = None
    term_sent: float = 0.0
    left: str | None = None  # why the child says it leaves on its own (status line `x`)
    buffer: bytes = b""


def attempts_still_owned(client: Client, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
    """Tell, for each (jid, worker, token), whether that pop still holds the job or ended it.

    A worker's own view of its job lags behind Redis (a child reports the end of a job after
    it sent the completion), so "not running for this worker" alone cannot tell a job taken
    away from one the worker has just completed, failed or retried itself. The engine records
    the attempt token with the outcome it accepted, which settles the question in one read.
    """
    def read(conn: redis.Redis) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        for jid, _, _ in attempts:
            pipe.hmget(f"ql:j:{jid}", ["state", "worker", "done"])
        return list(pipe.execute())

    rows = client.read(read) if attempts else []
    owned = []
    for (_, worker, token), (state, holder, done) in zip(attempts, rows, strict=True):
        settled = bool(token) and str(done or "").startswith(f"{token} ")
        owned.append((state == "running" and holder == worker) or settled)
    return owned


class ChildChannels:
    """Subscribe to the worker channels of the live children; poll for events."""

    def __init__(self, conn: redis.Redis, health_check_interval: float = 10.0) -> None:
        self.conn = conn
        self.health_check_interval = health_check_interval
        self.names: set[str] = set()
        self._pubsub: Any = None
        self._last_traffic = time.monotonic()
        self._retry_at = 0.0
        self._connected_once = False
        # Set after a reconnect: events may have been missed, the caller re-checks jobs.
        self.missed_events = False

    def _ensure(self) -> Any:
        if self._pubsub is not None or time.monotonic() < self._retry_at:
            return self._pubsub
        try:
            pubsub = self.conn.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
            if self.names:
                pubsub.subscribe(*[_PREFIX + n for n in sorted(self.names)])
            else:
                pubsub.subscribe(_PREFIX + "-")  # keep the connection in pubsub mode
            self._pubsub = pubsub
            self._last_traffic = time.monotonic()
            if self._connected_once:
                self.missed_events = True
            self._connected_once = True
        except (redis.RedisError, OSError) as exc:
            log.warning("supervisor pubsub unavailable (%s); retrying", exc)
            self._retry_at = time.monotonic() + 1.0
        return self._pubsub

    def _broken(self, exc: BaseException) -> None:
        log.warning("supervisor pubsub connection lost (%s); reconnecting", exc)
        self.close()
        self._retry_at = 0.0  # at once; _ensure backs off only if reconnecting fails

    def add(self, name: str) -> None:
        """Listen for worker `name`."""
        self.names.add(name)
        pubsub = self._ensure()
        if pubsub is None:
            return
        try:
            pubsub.subscribe(_PREFIX + name)
        except (redis.RedisError, OSError) as exc:
            self._broken(exc)

    def remove(self, name: str) -> None:
        """Stop listening for worker `name`."""
        self.names.discard(name)
        if self._pubsub is None:
            return
        try:
            self._pubsub.unsubscribe(_PREFIX + name)
        except (redis.RedisError, OSError) as exc:
            self._broken(exc)

    def fileno(self) -> int | None:
        """Return the socket to poll, if connected."""
        pubsub = self._ensure()
        conn = getattr(pubsub, "connection", None)
        sock = getattr(conn, "_sock", None)
        return None if sock is None else int(sock.fileno())

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the socket will not report again."""
        conn = getattr(self._pubsub, "connection", None)
        try:
            return bool(conn is not None and conn.can_read(timeout=0))
        except (redis.RedisError, OSError, ValueError, TypeError, AttributeError):
            return True

    def poll(self) -> list[tuple[str, dict[str, Any]]]:
        """Return the (worker, payload) events received so far, without blocking."""
        pubsub = self._ensure()
        events: list[tuple[str, dict[str, Any]]] = []
        if pubsub is None:
            return events
        try:
            while True:
                msg = pubsub.get_message(timeout=0.0)
                if msg is None:
                    break
                self._last_traffic = time.monotonic()
                if msg.get("type") != "message":
                    continue
                channel = str(msg.get("channel", ""))
                try:
                    payload = json.loads(msg.get("data") or "{}")
                except (TypeError, ValueError):
                    continue
                if isinstance(payload, dict):
                    events.append((channel[len(_PREFIX):], payload))
            if time.monotonic() - self._last_traffic >= self.health_check_interval:
                pubsub.ping()
                self._last_traffic = time.monotonic()
        except (redis.RedisError, OSError, ValueError, TypeError, AttributeError) as exc:
            # hiredis raises TypeError/AttributeError on a socket closed under it.
            self._broken(exc)
        return events

    def close(self) -> None:
        """Drop the connection."""
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:  # noqa: S110 - a broken socket may refuse to close cleanly
                pass
        self._pubsub = None
