"""Engine calls sent now and read later, so a worker runs its next job while Redis works.

A worker that holds its next job already can send the finished job's `complete.reserve` and
start the next job at once: the reply is read when that job ends (or by the heartbeat thread,
if it runs long). The call carries an attempt token, so after a lost reply the channel sends
it once more and the engine answers with what the first one did, exactly as
`Client.call_replayable` does.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Generic, TypeVar

__all__ = ["DeferredCall"]

T = TypeVar("T")


class DeferredCall(Generic[T]):
    """One engine call in flight; `result()` reads and decodes its reply exactly once."""

    __slots__ = ("_read", "_parse", "_lock", "_done", "_value", "_error")

    def __init__(self, read: Callable[[], Any], parse: Callable[[Any], T]) -> None:
        self._read = read  # returns the raw reply (a `Pending.reply`)
        self._parse = parse
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None

    def result(self) -> T:
        """Return the decoded reply (reading it on first use); raise the call's error."""
        with self._lock:
            if not self._done:
                # An interruption (KeyboardInterrupt and the like) leaves it not done: the
                # next result() sends the call again, which the attempt token makes safe.
                try:
                    self._value = self._parse(self._read())
                except Exception as exc:
                    self._error = exc
                self._done = True
            if self._error is not None:
                raise self._error
            return self._value  # type: ignore[return-value]
