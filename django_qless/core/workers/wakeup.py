"""Block an idle worker until a queue it serves gets work (no sleep-polling).

The engine publishes the queue name on `ql:wake:<queue>` whenever jobs become ready there.
The waiter subscribes to those channels and waits for the confirmation *before* the worker's
first reserve, so a put that lands between "reserve found nothing" and "start waiting" is
never missed: its wake-up is already buffered on the subscribed socket.

It also listens on `ql:hand:<worker>`: a worker that found nothing registers as idle
(`reserve.wait`), and the engine then pops the next ready job for it and publishes the job
there (engine handoff.lua), saving the reserve round trip. Handed jobs are kept in `handed`
until the worker takes them. If the subscription breaks, messages may have been lost:
`lost` is set, and the worker looks up the jobs the engine says it holds.
"""

from __future__ import annotations

import json
import logging
import select
import time
from collections.abc import Callable
from typing import Any

import redis

from django_qless.core.workers.reservers import QueueSelection
from django_qless.core.workers.shutdown import WakePipe

__all__ = ["WakeWaiter"]

log = logging.getLogger("django_qless.worker")

_PREFIX = "ql:wake:"
HAND_PREFIX = "ql:hand:"
# What ended one wait (see WakeWaiter._wait_once).
_MESSAGE, _SIGNAL, _TIMEOUT = "message", "signal", "timeout"


class WakeWaiter:
    """A pubsub connection on the wake channels plus the process's wake pipe."""

    def __init__(
        self, conn: redis.Redis, selection: QueueSelection, pipe: WakePipe, worker: str = ""
    ) -> None:
        self.conn = conn
        self.selection = selection
        self.pipe = pipe
        # The worker's hand-off channel ("" : none): jobs published there are kept in `handed`.
        self.hand_channel = HAND_PREFIX + worker if worker else ""
        self.handed: list[dict[str, Any]] = []
        self.lost = False  # the subscription broke: hand-offs may have been missed
        self._pubsub: Any = None
        self._subscribed: tuple[frozenset[str], frozenset[str]] | None = None
        self._broken_until = 0.0

    @property
    def subscribed(self) -> bool:
        """Tell whether the wake channels (and the hand-off channel) are listened to now."""
        return self._pubsub is not None

    # -- subscription ---------------------------------------------------------------------
    def ensure_subscribed(self) -> None:
        """Subscribe to the wake channels (waiting for Redis to confirm) if not done yet."""
        if self._pubsub is not None and self._subscribed is not None:
            return  # the channels follow the queue specs, which never change
        channels, patterns = self.selection.wake_channels()
        if self.hand_channel:
            channels = [*channels, self.hand_channel]
        wanted = (frozenset(channels), frozenset(patterns))
        if time.monotonic() < self._broken_until:
            return
        try:
            self._subscribe(wanted)
        except redis.RedisError as exc:
            log.warning("wake-up subscription failed (%s); polling every interval", exc)
            self.close()
            self._broken_until = time.monotonic() + 1.0

    def _subscribe(self, wanted: tuple[frozenset[str], frozenset[str]]) -> None:
        self.close()
        pubsub = self.conn.pubsub()  # type: ignore[no-untyped-call, unused-ignore]
        pending = 0
        if wanted[0]:
            pubsub.subscribe(*sorted(wanted[0]))
            pending += len(wanted[0])
        if wanted[1]:
            pubsub.psubscribe(*sorted(wanted[1]))
            pending += len(wanted[1])
        deadline = time.monotonic() + 5.0
        while pending and time.monotonic() < deadline:
            msg = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if msg is None:
                continue
            if msg["type"] in ("subscribe", "psubscribe"):
                pending -= 1
            elif msg["type"] == "message" and msg.get("channel") == self.hand_channel:
                self._keep_handed(msg.get("data"))
        if pending:
            pubsub.close()
            raise redis.TimeoutError("no subscribe confirmation from Redis")
        self._pubsub = pubsub
        self._subscribed = wanted

    def close(self) -> None:
        """Drop the pubsub connection (messages sent to it from now on are lost)."""
        if self._pubsub is not None:
            self.lost = True
            try:
                self._pubsub.close()
            except Exception:  # noqa: S110 - closing a broken socket may fail; nothing to do
                pass
        self._pubsub = None
        self._subscribed = None

    # -- waiting --------------------------------------------------------------------------
    def drain(self) -> list[str]:
        """Consume buffered wake-ups without blocking; return the queue names they named."""
        names: list[str] = []
        if self._pubsub is None:
            return names
        try:
            while True:
                msg = self._pubsub.get_message(timeout=0.0)
                if msg is None:
                    return names
                if msg["type"] in ("message", "pmessage"):
                    if msg.get("channel") == self.hand_channel:
                        self._keep_handed(msg.get("data"))
                        continue
                    name = _queue_of(msg)
                    names.append(name)
                    self.selection.note_wake(name)
        except (redis.RedisError, OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("wake-up connection lost (%s); resubscribing", exc)
            self.close()
            return names

    def _keep_handed(self, data: Any) -> None:
        try:
            job = json.loads(data)
        except (TypeError, ValueError):
            log.error("unreadable hand-off message ignored: %.200r", data)
            return
        if isinstance(job, dict) and job.get("jid"):
            self.handed.append(job)

    def stop_hand_offs(self) -> None:
        """Unsubscribe from the hand-off channel, keeping what arrived before (leaving).

        Redis confirms the unsubscribe after every message published before it, and hands
        nothing to a worker nobody listens for: afterwards `handed` is complete.
        """
        pubsub = self._pubsub
        if pubsub is None or not self.hand_channel:
            return
        try:
            pubsub.unsubscribe(self.hand_channel)
            deadline = time.monotonic() + 2.0
            while time.monotonic() < deadline:
                msg = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
                if msg is None:
                    continue
                if msg.get("channel") != self.hand_channel:
                    continue
                if msg["type"] == "unsubscribe":
                    return
                if msg["type"] == "message":
                    self._keep_handed(msg.get("data"))
        except (redis.RedisError, OSError, ValueError, TypeError, AttributeError) as exc:
            log.warning("could not stop hand-offs cleanly (%s)", exc)
        self.close()

    def take_handed(self) -> list[dict[str, Any]]:
        """Return the jobs handed to this worker since the last call (job-thread only)."""
        jobs, self.handed = self.handed, []
        return jobs

    def wait(
        self, timeout: float, keep_waiting: Callable[[], bool] | None = None, every: float = 1.0
    ) -> bool:
        """Block until a wake-up message, a wake-pipe byte, or `timeout`; True if a message.

        With `keep_waiting`, the wait is cut into slices of `every` seconds and ends after the
        first slice for which it answers False (a check that costs Redis nothing, such as "is
        the supervisor still there"), so a long wait stays cheap without going deaf.
        """
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            left = deadline - time.monotonic()
            if keep_waiting is None or left <= every:
                return self._wait_once(left) == _MESSAGE
            woke = self._wait_once(every)
            if woke != _TIMEOUT or not keep_waiting():
                return woke == _MESSAGE

    def _wait_once(self, timeout: float) -> str:
        """Block once; say what ended the wait (a message, a signal or the timeout)."""
        timeout = max(0.0, timeout)
        pubsub = self._pubsub
        if pubsub is None:
            # Lost the subscription (connection dropped): get it back first. Once back, a
            # put may have slipped by while we were deaf, so reserve again at once.
            self.ensure_subscribed()
            if self._pubsub is not None:
                return _MESSAGE
            ready = _poll([self.pipe.read_fd], min(timeout, 1.0))
            self.pipe.drain()
            return _SIGNAL if ready else _TIMEOUT
        try:
            conn = pubsub.connection
            # Data already buffered in redis-py's parser is invisible to poll().
            if conn is not None and conn.can_read(timeout=0):
                return _MESSAGE
            sock = getattr(conn, "_sock", None) if conn is not None else None
            if sock is None:
                msg = pubsub.get_message(timeout=timeout)
                return _MESSAGE if msg is not None else _TIMEOUT
            ready = _poll([sock.fileno(), self.pipe.read_fd], timeout)
            if self.pipe.read_fd in ready:
                self.pipe.drain()
            if sock.fileno() in ready:
                return _MESSAGE
            return _SIGNAL if self.pipe.read_fd in ready else _TIMEOUT
        except (redis.RedisError, OSError, ValueError, TypeError, AttributeError) as exc:
            # hiredis raises TypeError/AttributeError on a socket closed under it.
            log.warning("wake-up wait failed (%s); resubscribing", exc)
            self.close()
            return _SIGNAL  # back to the loop at once: it resubscribes and reserves


def _poll(fds: list[int], timeout: float) -> set[int]:
    """Wait until one of `fds` is readable; return the readable ones."""
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    try:
        events = poller.poll(timeout * 1000.0)
    except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for safety
        return set()
    return {fd for fd, _ in events}


def _queue_of(msg: dict[str, Any]) -> str:
    channel = str(msg.get("channel", ""))
    data = msg.get("data")
    if isinstance(data, str) and data:
        return data
    return channel[len(_PREFIX):] if channel.startswith(_PREFIX) else channel
