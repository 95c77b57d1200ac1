"""The server clock: Redis `TIME` plus the local monotonic clock, re-measured every minute."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

__all__ = ["ServerClock"]


class ServerClock:
    """Return the Redis server's time without a round trip per call.

    The offset between the server clock and the local monotonic clock is measured at
    the midpoint of a `TIME` round trip, at first use and again every `refresh` seconds
    (and after a fork). Using the monotonic clock makes local wall-clock steps and skew
    irrelevant: every process agrees with the one Redis host.
    """

    def __init__(
        self,
        server_time: Callable[[], float],
        *,
        local: Callable[[], float] = time.monotonic,
        refresh: float = 60.0,
    ) -> None:
        self._server_time = server_time
        self._local = local
        self._refresh = refresh
        self._lock = threading.Lock()
        self._offset: float | None = None
        self._measured_at = 0.0
        self._pid = os.getpid()
        self.measurements = 0

    def reset(self) -> None:
        """Forget the offset so the next call measures again."""
        self._offset = None

    @property
    def offset(self) -> float | None:
        """Return server time minus local clock, or None before the first measurement."""
        return self._offset

    def _measure(self) -> float:
        """Read TIME and compute the offset at the midpoint of the round trip."""
        before = self._local()
        server = self._server_time()
        after = self._local()
        offset = server - (before + after) / 2.0
        self._offset = offset
        self._measured_at = after
        self._pid = os.getpid()
        self.measurements += 1
        return offset

    def __call__(self) -> float:
        """Return the current server time in epoch seconds."""
        local = self._local()
        offset = self._offset
        if offset is not None and local - self._measured_at < self._refresh:
            if self._pid == os.getpid():
                return local + offset
        if self._pid != os.getpid():
            # A lock held by another thread at fork time would never be released here.
            self._lock = threading.Lock()
            self._offset = None
        with self._lock:
            offset = self._offset
            if offset is None or self._local() - self._measured_at >= self._refresh:
                try:
                    offset = self._measure()
                except Exception:
                    if offset is None:
                        raise
                    # Keep the last good offset; the caller's own command will report
                    # the outage, and the next call measures again.
        return self._local() + offset
