"""Engine calls sent now and read later, so a worker runs its next job while Redis works.

A worker that holds its next job already can send the finished job's `complete.reserve` and
start the next job at once: the reply is read when that job ends (or by the heartbeat thread,
if it runs long). The call carries an attempt token, so after a lost reply it is sent once
more and the engine answers with what the first one did, exactly as `call_replayable` does.

The call uses a side connection of its own: job code running meanwhile calls the engine on
the thread's usual connection, and must never read this call's reply by mistake.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import redis

from .exceptions import InvalidArgument, error_from_reply
from .pool import send

if TYPE_CHECKING:
    from .client import Client

__all__ = ["DeferredCall", "SideConnection"]

T = TypeVar("T")
_TRANSPORT_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError)


class SideConnection:
    """A few pooled connections kept aside for deferred calls (one per call in flight)."""

    __slots__ = ("_pool", "_lock", "_idle")

    #: Connections kept between calls (a worker has at most two calls in flight).
    keep = 2

    def __init__(self, pool: Any) -> None:
        self._pool = pool
        self._lock = threading.Lock()
        self._idle: list[tuple[int, Any]] = []  # (pid, connection)

    def take(self, pid: int) -> Any:
        """Return a kept connection, or a fresh one from the pool if none is free."""
        with self._lock:
            idle = self._idle.pop() if self._idle else None
        if idle is not None and idle[0] == pid:
            return idle[1]
        return self._pool.get_connection()  # none kept, or inherited across fork

    def give(self, pid: int, conn: Any) -> None:
        """Keep `conn` for a later deferred call (or return it to the pool)."""
        with self._lock:
            if len(self._idle) < self.keep:
                self._idle.append((pid, conn))
                return
        self._pool.release(conn)

    def drop(self, conn: Any) -> None:
        """Disconnect `conn` after a transport error and return it to the pool."""
        conn.disconnect()
        self._pool.release(conn)


class DeferredCall(Generic[T]):
    """One engine call in flight; `result()` reads and decodes its reply exactly once."""

    __slots__ = ("_client", "_argv", "_command", "_conn", "_pid", "_parse", "_lock", "_done",
                 "_value", "_error")

    def __init__(self, client: Client, argv: Sequence[str], parse: Callable[[Any], T]) -> None:
        self._client = client
        self._argv = tuple(argv)
        self._parse = parse
        self._lock = threading.Lock()
        self._done = False
        self._value: T | None = None
        self._error: BaseException | None = None
        self._command = client._engine.command(self._argv)
        self._pid, side = client._side_connection()
        conn = side.take(self._pid)
        try:
            send(conn, self._command)
        except UnicodeEncodeError as exc:
            side.give(self._pid, conn)  # raised while packing: nothing was sent
            raise InvalidArgument(f"argument is not valid UTF-8 text: {exc.reason}") from None
        except _TRANSPORT_ERRORS:
            side.drop(conn)
            conn = None  # result() sends it again: the token makes that safe
        self._conn: Any = conn

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

    def _read(self) -> Any:
        client = self._client
        conn, self._conn = self._conn, None
        if conn is None:
            return client._invoke(self._argv)  # the send failed: send it again
        _, side = client._side_connection()
        try:
            reply = conn.read_response()
        except redis.ResponseError as exc:
            side.give(self._pid, conn)
            if client._engine.missing(exc, self._command):
                client._recover(exc)  # the engine was not loaded: nothing ran
                return client._invoke(self._argv)
            raise error_from_reply(exc) from exc
        except _TRANSPORT_ERRORS:
            side.drop(conn)
            # The reply was lost: the repeat gets what the first call did (attempt token).
            return client._invoke(self._argv)
        except BaseException:
            side.drop(conn)  # interrupted mid-reply: what is left on it is unknown
            raise
        side.give(self._pid, conn)
        return reply
