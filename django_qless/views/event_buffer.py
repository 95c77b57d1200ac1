"""A per-process buffer of recent engine events, so a reconnecting event stream resumes by id.

The engine publishes events without keeping them. One subscriber thread per web process
reads the log channel of every shard of the alias (one connection per node; each event
labelled with its shard) into a bounded buffer, numbering each event in arrival order;
every event-stream response reads from that buffer, and the id it sends
(``<buffer token>-<number>``) comes back as ``Last-Event-ID`` when the browser reconnects, so
the events published in between are replayed. The subscription outlives a response by
``EVENTS_LINGER_SECONDS``, which covers the browser's reconnect delay, and stops once no
stream has been attached for that long.
"""

from __future__ import annotations

import contextlib
import logging
import re
import secrets
import threading
import time
from collections import deque
from typing import Any

from django_qless.core.feed import LogFeed
from django_qless.core.types import QlessClient

__all__ = ["EventBuffer", "acquire"]

logger = logging.getLogger("django_qless")
_ID = re.compile(r"^([0-9a-f]{8})-([0-9]{1,18})$")
_lock = threading.Lock()
_current: EventBuffer | None = None


class EventBuffer:
    """Recent events of an alias's log channels (every shard's), numbered from 1, in the
    order they arrived."""

    def __init__(self, client: QlessClient, size: int, linger: float) -> None:
        self.token = secrets.token_hex(4)  # tells this buffer's ids from another process's
        self.client = client  # the alias's Client or ShardedClient
        self._events: deque[tuple[int, dict[str, Any]]] = deque(maxlen=size)
        self._seq = 0
        self._readers = 0
        self._idle_since = time.monotonic()
        self._linger = linger
        self._cond = threading.Condition()
        self.alive = True
        self._feed = LogFeed(client.clients())
        if not self._feed.open():
            self._feed.close()
            raise ConnectionError("the event channel subscription was not confirmed")
        threading.Thread(target=self._run, name="qless-events", daemon=True).start()

    def _run(self) -> None:
        try:
            while True:
                payload = self._feed.next(timeout=0.5)
                with self._cond:
                    if payload is not None:
                        payload.setdefault("when", time.time())
                        self._seq += 1
                        self._events.append((self._seq, payload))
                        self._cond.notify_all()
                    if self._readers == 0 and time.monotonic() - self._idle_since > self._linger:
                        return
        except Exception:  # noqa: BLE001 - a lost connection ends this buffer; streams restart
            logger.info("qless event buffer stopped", exc_info=True)
        finally:
            with self._cond:
                self.alive = False
                self._cond.notify_all()
            with contextlib.suppress(Exception):  # the connection may already be gone
                self._feed.close()

    def attach(self) -> None:
        """Count a reading stream (the buffer stays up while any is attached)."""
        with self._cond:
            self._readers += 1

    def detach(self) -> None:
        """Uncount a stream; the buffer lingers for the browser's reconnect."""
        with self._cond:
            self._readers -= 1
            self._idle_since = time.monotonic()

    def resume(self, last_id: str) -> tuple[int, bool]:
        """Return the number to read after for ``Last-Event-ID``, and whether events were lost."""
        with self._cond:
            match = _ID.match(last_id or "")
            if not last_id:
                return self._seq, False
            if match is None or match.group(1) != self.token:
                return self._seq, True  # another process or an earlier buffer: unknown gap
            seen = int(match.group(2))
            oldest = self._events[0][0] if self._events else self._seq + 1
            if seen > self._seq:
                return self._seq, True
            return max(seen, oldest - 1), seen < oldest - 1

    def after(self, seq: int, timeout: float) -> list[tuple[int, dict[str, Any]]]:
        """Wait up to ``timeout`` s for events numbered above ``seq``; return them in order."""
        with self._cond:
            self._cond.wait_for(lambda: self._seq > seq or not self.alive, timeout)
            return [(n, p) for n, p in self._events if n > seq]


def acquire(client: QlessClient, size: int, linger: float) -> EventBuffer:
    """Return this process's running buffer for ``client`` (the alias's Client or
    ShardedClient; starting one), attached."""
    global _current
    with _lock:
        buffer = _current
        if buffer is None or not buffer.alive or buffer.client is not client:
            buffer = EventBuffer(client, size, linger)
            _current = buffer
        buffer.attach()
        return buffer
