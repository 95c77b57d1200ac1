"""Listen on `w:<worker>` for events that take a running job away from its worker.

One listener per keyspace the worker serves (a shard's channel is heard on its primary:
subscription.py; after a failover the listener reconnects to the new one). The engine
publishes `lock_lost` (the lease expired and the job was offered elsewhere, or it
was timed out, or re-put by someone else), `canceled` and `put` there. Each is a reason to stop
the job at once: its result would be refused anyway. `add()` returns only once Redis has
confirmed the subscription (no event lost between "job started" and "listening").
"""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django_qless.core.signalmask import block_async_signals
from django_qless.core.workers.subscription import PUBSUB_ERRORS, Subscription

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ABORT_EVENTS", "WorkerChannelListener"]

log = logging.getLogger("django_qless.worker")

ABORT_EVENTS = frozenset({"lock_lost", "canceled", "put"})


class WorkerChannelListener(threading.Thread):
    """A daemon thread subscribed to the channels of one or more worker names in one
    keyspace."""

    def __init__(
        self,
        client: Client,
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        health_check_interval: float = 10.0,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="qless-worker-listener", daemon=True)
        self.client = client
        self._prefix = client.keyspace.channel("w:")
        self.on_event = on_event
        self.health_check_interval = health_check_interval
        # Called once re-subscribed after a dropped connection: events may have been missed.
        self.on_reconnect = on_reconnect
        self._sessions = 0
        self._lock = threading.Lock()
        self._wanted: set[str] = set()
        self._confirmed: dict[str, threading.Event] = {}
        self._stop_event = threading.Event()
        self._changed = threading.Event()

    # -- public API -----------------------------------------------------------------------
    def add(self, worker: str, wait: float = 5.0) -> bool:
        """Listen for `worker`; wait until subscribed (True) or `wait` seconds passed."""
        with self._lock:
            self._wanted.add(worker)
            event = self._confirmed.setdefault(worker, threading.Event())
        self._changed.set()
        if not self.is_alive():
            return False
        return event.wait(wait)

    def remove(self, worker: str) -> None:
        """Stop listening for `worker`."""
        with self._lock:
            self._wanted.discard(worker)
            self._confirmed.pop(worker, None)
        self._changed.set()

    def stop(self) -> None:
        """End the thread (it leaves within about half a second)."""
        self._stop_event.set()

    # -- thread ---------------------------------------------------------------------------
    def run(self) -> None:
        block_async_signals()
        backoff = 0.1
        while not self._stop_event.is_set():
            pubsub = Subscription(self.client)
            try:
                self._serve(pubsub)
                backoff = 0.1
            except PUBSUB_ERRORS as exc:
                if self._stop_event.is_set():
                    break
                log.warning("worker-channel listener lost its connection (%s); reconnecting", exc)
                with self._lock:
                    for event in self._confirmed.values():
                        event.clear()
                self._stop_event.wait(backoff * (1 + random.random()))  # noqa: S311
                backoff = min(backoff * 2, 5.0)
            finally:
                pubsub.close()

    def _serve(self, pubsub: Subscription) -> None:
        self._sessions += 1
        recheck = self._sessions > 1 and self.on_reconnect is not None
        subscribed: set[str] = set()
        last_ping = time.monotonic()
        self._changed.set()
        while not self._stop_event.is_set():
            if self._changed.is_set():
                self._changed.clear()
                with self._lock:
                    wanted = set(self._wanted)
                add = wanted - subscribed
                drop = subscribed - wanted
                if add:
                    pubsub.subscribe([self._prefix + w for w in add])
                if drop:
                    pubsub.unsubscribe([self._prefix + w for w in drop])
                subscribed = wanted
            if not subscribed:
                self._changed.wait(0.5)
                continue
            msg = pubsub.get(timeout=0.2)
            now = time.monotonic()
            if msg is None:
                if now - last_ping >= self.health_check_interval:
                    # Half-open sockets deliver nothing and raise nothing: probe them.
                    pubsub.ping()
                    last_ping = now
                continue
            last_ping = now
            self._handle(msg)
            if recheck and Subscription.confirms(msg) and self.on_reconnect is not None:
                recheck = False
                try:
                    self.on_reconnect()
                except Exception:
                    log.exception("re-check after reconnect failed")

    def _handle(self, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = str(msg.get("channel", ""))
        prefix = self._prefix
        worker = channel[len(prefix):] if channel.startswith(prefix) else channel
        if Subscription.confirms(msg):
            with self._lock:
                event = self._confirmed.get(worker)
            if event is not None:
                event.set()
            return
        if kind not in ("message", "smessage"):
            return
        try:
            payload = json.loads(msg.get("data") or "{}")
        except (TypeError, ValueError):
            log.warning("ignoring malformed event on %s: %r", channel, msg.get("data"))
            return
        if not isinstance(payload, dict):
            return
        try:
            self.on_event(worker, payload)
        except Exception:
            log.exception("worker-channel event handler failed for %r", payload)
