"""Turn qless pubsub events into Django signals (``manage.py qless_events`` runs this).

Never started from ``AppConfig.ready``: start it explicitly. The core listener reconnects and
health-checks its connection; signals are sent with ``send_robust`` so a receiver that raises
is logged and the others still run. Delivery is at-most-once (events published while the
listener reconnects are lost); read job state from Redis when it matters.

Each event is bridged once: put/completed/failed/canceled/lock_lost come from the log
channel (every job, richer payload); popped/stalled/track/untrack exist only on the jid-only
channels, which qless publishes for tracked jobs.

A sharded alias is listened to on every shard, in one thread on one connection per primary
(`core/shard_events.py`: SSUBSCRIBE per shard on its primary), each signal carrying the
client of the shard the event came from.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType
from typing import Any

from django_qless.clients import get_client
from django_qless.core.client import Client
from django_qless.core.cluster.shard_events import ShardEvents
from django_qless.settings import DEFAULT_ALIAS
from django_qless.signals import BRIDGED_SIGNALS

__all__ = ["Bridge", "LOG_EVENTS", "serve"]

log = logging.getLogger("django_qless")

LOG_EVENTS = frozenset({"put", "completed", "failed", "canceled", "lock_lost"})
JID_CHANNEL_EVENTS = frozenset({"popped", "stalled", "track", "untrack"})


class Bridge:
    """Listen to one alias's events (every shard's) and send the matching Django signals."""

    def __init__(self, alias: str = DEFAULT_ALIAS, *, events: Iterable[str] | None = None,
                 health_check_interval: float = 10.0) -> None:
        self.alias = alias
        self.client = get_client(alias)
        self.events_wanted = frozenset(events) if events is not None else None
        self.listener = ShardEvents(self.client.clients(),
                                    health_check_interval=health_check_interval)
        self.listener.on(self.handle)
        self.sent = 0
        self._lock = threading.Lock()  # listeners are threads: count sends one at a time
        self._stopped = threading.Event()

    def wanted(self, event: dict[str, Any], shard: Client | None = None) -> bool:
        """Return whether this event should become a signal (and only once)."""
        name = str(event.get("event", ""))
        if self.events_wanted is not None and name not in self.events_wanted:
            return False
        keyspace = (shard or self.client.clients()[0]).keyspace
        from_log = event.get("channel") == keyspace.channel("log")
        if name in LOG_EVENTS:
            return from_log
        return name in JID_CHANNEL_EVENTS and not from_log

    def handle(self, event: dict[str, Any], shard: Client | None = None) -> None:
        """Send the signal for one event of `shard` (default: the only keyspace's); receivers
        that raise are logged, not fatal."""
        shard = shard or self.client.clients()[0]
        if not self.wanted(event, shard):
            return
        signal = BRIDGED_SIGNALS[str(event["event"])]
        payload = {k: v for k, v in event.items() if k != "channel"}
        if shard.shard is not None:
            payload["shard"] = shard.shard
        responses = signal.send_robust(sender=self.alias, jid=str(event.get("jid", "")),
                                       event=payload, client=shard)
        with self._lock:
            self.sent += 1
        for receiver, response in responses:
            if isinstance(response, Exception):
                log.error("django_qless: receiver %r failed on %s %s", receiver,
                          event.get("event"), event.get("jid"), exc_info=response)

    def start(self, timeout: float = 10.0) -> Bridge:
        """Start listening; return once every shard is subscribed."""
        self.listener.start(timeout)
        return self

    def stop(self) -> None:
        """Stop listening."""
        self._stopped.set()
        self.listener.stop()

    def run_forever(self) -> None:
        """Start, then block until ``stop()`` is called (from a signal handler)."""
        self.start()
        try:
            while not self._stopped.wait(1.0):
                pass
        finally:
            self.listener.stop()

    def __enter__(self) -> Bridge:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve(alias: str = DEFAULT_ALIAS, *, events: Iterable[str] | None = None,
          health_check_interval: float = 10.0,
          ready: Callable[[], None] | None = None) -> int:
    """Bridge events until SIGTERM/SIGINT (main thread only); return how many were sent.

    `ready` is called once the listener is subscribed, so a caller can wait for it.
    """
    from django_qless.registry import setup

    setup()  # receivers in <app>.jobs modules get connected
    bridge = Bridge(alias, events=events, health_check_interval=health_check_interval)

    def stop(signum: int, frame: FrameType | None) -> None:
        bridge.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    bridge.start()
    if ready is not None:
        ready()
    bridge.run_forever()
    return bridge.sent
