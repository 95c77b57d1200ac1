"""A rate limit's starts as the engine recorded them, read from its log while workers run.

The job's own clock is the wrong witness for a limit: a child that is still starting up runs
a job some tenths of a second after the engine admitted it, so two starts can look closer
than the limit allows when their admissions were not. The log holds each admission in whole
milliseconds of the server's clock and forgets it one period later, so polling it more
often than that sees every one.
"""

from __future__ import annotations

import threading
from types import TracebackType
from typing import Any

__all__ = ["AdmissionLog"]


class AdmissionLog:
    """Poll a budget's log keys in a thread; keep every admission seen (jid -> ms)."""

    def __init__(self, conn: Any, *keys: str, every: float = 0.05) -> None:
        self.conn, self.keys, self.every = conn, keys, every
        self.seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> AdmissionLog:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _read(self) -> None:
        for key in self.keys:
            for member, score in self.conn.zrange(key, 0, -1, withscores=True):
                text = member.decode() if isinstance(member, bytes) else member
                self.seen[text.split(" ")[0]] = int(score)

    def _poll(self) -> None:
        while True:
            self._read()
            if self._stop.wait(self.every):
                self._read()
                return

    def times(self) -> list[int]:
        """Return the admissions seen so far, in ms of the server's clock, sorted."""
        return sorted(self.seen.values())

    def of(self, jid: str) -> int | None:
        """Return when `jid` was admitted (ms), or None if it was not yet."""
        return self.seen.get(jid)
