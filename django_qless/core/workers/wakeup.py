"""Block an idle worker until a queue it serves gets work (no sleep-polling).

The engine publishes the queue name on `wake:<queue>` whenever jobs become ready there. The
waiter subscribes (one connection per primary: engine/pubsub.py) and waits for the
confirmations before the worker's first reserve, so a put landing before the wait is
buffered. Sharded channels have no patterns: a pattern is listened to as the queues it
matches now. With all its queues in one keyspace it also listens on `hand:<worker>` for the
jobs the engine pops for it while idle (`reserve.wait`), kept in `handed`; a broken
hand-off subscription sets `lost` (the worker then looks up the jobs it holds).
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from django_qless.core.engine.pubsub import (
    MESSAGE_TYPES,
    PUBSUB_ERRORS,
    Hub,
    Subscription,
    poll_readable,
)

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.workers.shards import QueueRoutes
    from django_qless.core.workers.shutdown import WakePipe

__all__ = ["WakeWaiter"]

log = logging.getLogger("django_qless.worker")

_Wanted = tuple[frozenset[str], frozenset[str]]
_MESSAGE, _SIGNAL, _TIMEOUT = "message", "signal", "timeout"  # what ended one wait
_RECHECK = 1.0  # seconds between looks at the queues' shards while subscribed


class WakeWaiter:
    """The wake-up (and hand-off) subscriptions of a job loop plus the process's wake pipe."""

    def __init__(self, routes: QueueRoutes, pipe: WakePipe, worker: str = "") -> None:
        self.routes = routes
        self.selection = routes.selection
        self.pipe = pipe
        # Hand-offs only with one keyspace: several shards could each hand a job at once.
        self.hand_client: Client | None = routes.single if worker else None
        self.hand_channel = (self.hand_client.keyspace.channel(f"hand:{worker}")
                             if self.hand_client is not None else "")
        self.handed: list[dict[str, Any]] = []
        self.lost = False  # the hand-off subscription broke: hand-offs may have been missed
        self._hub = Hub()  # one connection per node, whatever the shards it holds
        self._subs: dict[str | None, Subscription] = {}
        self._wanted: dict[str | None, _Wanted] = {}
        self._version = -1
        self._broken_until = 0.0
        self._ready = False  # every wanted subscription confirmed (until one breaks)
        self._recheck_at = 0.0

    @property
    def subscribed(self) -> bool:
        """Tell whether every wake channel (and the hand-off channel) is listened to now."""
        return self._ready and all(self._subs[tag].connected for tag in self._wanted)

    def _plan(self) -> None:
        """Work out which channels each shard's subscription needs (after a re-resolve)."""
        groups = self.routes.by_shard()
        if self.routes.version == self._version and self._wanted:
            return
        self._version = self.routes.version
        single = self.routes.single
        clients = {c.shard: c for c, _ in groups}
        if single is not None:
            # Listen there even if patterns match nothing yet (and where queues moved).
            clients = {single.shard: single, **clients}
        queues = {c.shard: names for c, names in groups}
        wanted: dict[str | None, _Wanted] = {}
        for tag, client in clients.items():
            sub = self._subs.get(tag)
            if sub is None:
                sub = self._subs[tag] = Subscription(client, self._hub)
            wanted[tag] = self._channels(sub, queues.get(tag, []))
        for tag in set(self._subs) - set(wanted):
            self._subs.pop(tag).close()
        self._wanted = wanted

    def _channels(self, sub: Subscription, queues: list[str]) -> _Wanted:
        """Return (channels, patterns) for one keyspace."""
        ks = sub.keyspace
        if sub.sharded is False:
            channels = {ks.channel(f"wake:{q}") for q in queues if q in self.selection.names_given}
            if sub.client is self.routes.single:
                channels |= {ks.channel(f"wake:{q}") for q in self.selection.names_given}
            patterns = {ks.pattern(f"wake:{p}") for p in self.selection.patterns}
        else:
            channels = {ks.channel(f"wake:{q}") for q in queues}
            patterns = set()
        if sub.client is self.hand_client and self.hand_channel:
            channels.add(self.hand_channel)
        return frozenset(channels), frozenset(patterns)

    def ensure_subscribed(self) -> None:
        """Subscribe (confirmed) where not done yet; shards re-checked once a second at most."""
        now = time.monotonic()
        if (self._ready and now < self._recheck_at) or now < self._broken_until:
            return
        try:
            self._plan()
        except PUBSUB_ERRORS as exc:  # placements are read from the cluster
            log.warning("could not look up the queues' shards (%s)", exc)
            self._broken_until = now + 1.0
            return
        self._recheck_at = now + _RECHECK
        ready = True
        for tag, (channels, patterns) in list(self._wanted.items()):
            sub = self._subs[tag]
            if sub.connected and sub.channels == channels and sub.patterns == patterns:
                continue
            try:
                self._subscribe(sub, tag)
            except PUBSUB_ERRORS as exc:
                log.warning("wake-up subscription failed (%s); polling every interval", exc)
                self._close(sub)
                self._broken_until = time.monotonic() + 1.0
                ready = False
        self._ready = ready

    def _subscribe(self, sub: Subscription, tag: str | None) -> None:
        """(Re)open `sub` with the channels wanted now and wait for every confirmation."""
        self._close(sub)
        sub.connect()
        channels, patterns = self._wanted[tag] = self._channels(sub, self._queues_of(tag))
        pending = [sub.subscribe(channels, patterns)]

        def confirmed(msg: dict[str, Any]) -> bool:
            pending[0] -= Subscription.confirms(msg)
            return pending[0] <= 0

        if pending[0] and not self._read_until(sub, 5.0, confirmed):
            raise redis.TimeoutError("no subscribe confirmation from Redis")

    def _read_until(self, sub: Subscription, seconds: float,
                    done: Callable[[dict[str, Any]], bool]) -> bool:
        """Read `sub` (taking its messages) until `done` says so (True) or `seconds` pass."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            msg = sub.get(timeout=left)
            if msg is not None and msg["type"] in MESSAGE_TYPES:
                self._take(msg)
            elif msg is not None and done(msg):
                return True
        return False

    def _queues_of(self, tag: str | None) -> list[str]:
        return next((names for c, names in self.routes.by_shard() if c.shard == tag), [])

    def _close(self, sub: Subscription) -> None:
        if sub.connected and sub.client is self.hand_client:
            self.lost = True
        self._ready = False
        sub.close()

    def close(self) -> None:
        """Drop every pubsub connection (messages sent to them from now on are lost)."""
        for sub in self._subs.values():
            self._close(sub)

    def drain(self) -> None:
        """Consume buffered messages without blocking (wake-ups noted, hand-offs kept)."""
        for sub in list(self._subs.values()):
            try:
                while (msg := sub.get(timeout=0.0)) is not None:
                    if msg["type"] in MESSAGE_TYPES:
                        self._take(msg)
            except PUBSUB_ERRORS as exc:
                log.warning("wake-up connection lost (%s); resubscribing", exc)
                self._close(sub)

    def _take(self, msg: dict[str, Any]) -> None:
        """Keep a hand-off, or note the queue a wake-up names."""
        channel, data = str(msg.get("channel", "")), msg.get("data")
        if channel == self.hand_channel:
            self._keep_handed(data)
        else:
            self.selection.note_wake(data if isinstance(data, str) and data
                                     else channel.rpartition("wake:")[2])

    def _keep_handed(self, data: Any) -> None:
        try:
            job = json.loads(data)
        except (TypeError, ValueError):
            log.error("unreadable hand-off message ignored: %.200r", data)
            return
        if isinstance(job, dict) and job.get("jid"):
            self.handed.append(job)

    def stop_hand_offs(self) -> None:
        """Unsubscribe from hand-offs (leaving); once confirmed, `handed` is complete.

        Redis confirms after every message published before, and hands nothing to a worker
        nobody listens for; unconfirmed, the subscription is closed with `lost` set.
        """
        hand = self.hand_client
        sub = None if hand is None else self._subs.get(hand.shard)
        if sub is None or not sub.connected or not self.hand_channel:
            return
        try:
            sub.unsubscribe([self.hand_channel])
            if self._read_until(sub, 2.0, lambda msg: msg.get("channel") == self.hand_channel
                                and msg["type"] in ("unsubscribe", "sunsubscribe")):
                return
        except PUBSUB_ERRORS as exc:
            log.warning("could not stop hand-offs cleanly (%s)", exc)
        self._close(sub)

    def disconnect(self) -> None:
        """Close every pub/sub connection, losing nothing (hand-offs stopped first)."""
        self.stop_hand_offs()
        for sub in self._subs.values():
            sub.close()  # (not _close: with hand-offs stopped cleanly nothing was lost)
        self._ready = False

    def take_handed(self) -> list[dict[str, Any]]:
        """Return the jobs handed to this worker since the last call (job-thread only)."""
        jobs, self.handed = self.handed, []
        return jobs

    def wait(self, timeout: float, keep_waiting: Callable[[], bool] | None = None) -> bool:
        """Block until a wake-up, a wake-pipe byte, or `timeout`; True if a message.
        `keep_waiting` (costing Redis nothing) is asked every second; False ends the wait."""
        deadline = time.monotonic() + max(0.0, timeout)
        version = self.routes.version
        while True:
            left = deadline - time.monotonic()
            if keep_waiting is None or left <= 1.0:
                return self._wait_once(left) == _MESSAGE
            woke = self._wait_once(1.0)
            if woke != _TIMEOUT or not keep_waiting():
                return woke == _MESSAGE
            # A queue moved shards: listen there too, and reserve again now.
            self.ensure_subscribed()
            if self.routes.version != version:
                return True

    def sockets(self) -> list[int]:
        """Return the subscriptions' sockets, for another thread to poll (never to read)."""
        socks = self._sockets(quiet=True)
        return [] if isinstance(socks, str) else list(socks)

    def _sockets(self, quiet: bool = False) -> set[int] | str:
        """Return the sockets to poll, or what ended the wait already: data buffered by
        redis-py (invisible to poll) or, unless `quiet`, a broken subscription."""
        socks = set()
        for sub in list(self._subs.values()):
            try:
                if not quiet and sub.buffered():
                    return _MESSAGE
                fd = sub.fileno()
            except PUBSUB_ERRORS as exc:
                if quiet:
                    continue
                log.warning("wake-up connection lost (%s); resubscribing", exc)
                self._close(sub)
                return _SIGNAL  # back to the loop at once: it resubscribes and reserves
            if fd is not None:
                socks.add(fd)
        return socks

    def wait_quietly(self, fd: int, timeout: float) -> bool:
        """Block until `fd` is readable, a signal, or `timeout`, sending Redis nothing (a
        child waiting for the leader token); True if a signal woke us. Messages that come
        meanwhile are read (noted, hand-offs kept), so they do not pile up on the server."""
        socks = self._sockets()
        if isinstance(socks, str):
            self.drain()
            return False
        ready = poll_readable([*socks, fd, self.pipe.read_fd], max(0.0, timeout))
        if not ready.isdisjoint(socks):
            self.drain()
        if self.pipe.read_fd in ready:
            self.pipe.drain()
            return True
        return False

    def _wait_once(self, timeout: float) -> str:
        """Block once; say what ended the wait (a message, a signal or the timeout)."""
        timeout = max(0.0, timeout)
        if not self.subscribed:
            # Lost a subscription (connection dropped, failover): get it back first. Once
            # back, a put may have slipped by while we were deaf, so reserve again at once.
            self.ensure_subscribed()
            if self.subscribed:
                return _MESSAGE
            timeout = min(timeout, 1.0)
        socks = self._sockets()
        if isinstance(socks, str):
            return socks
        ready = poll_readable([*socks, self.pipe.read_fd], timeout)
        if self.pipe.read_fd in ready:
            self.pipe.drain()
        if not ready.isdisjoint(socks):
            return _MESSAGE
        return _SIGNAL if self.pipe.read_fd in ready else _TIMEOUT

