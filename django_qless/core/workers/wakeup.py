"""Block an idle worker until a queue it serves gets work (`wake:<queue>`) or the engine
hands it a job (`hand:<worker>`, one keyspace only). Subscriptions are confirmed before the
first reserve, so a put landing before the wait is buffered. Sharded channels have no
patterns: a pattern is listened to as the queues it matches now.
"""
from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import redis

from django_qless.core.engine.pubsub import PUBSUB_ERRORS, Hub, poll_readable
from django_qless.core.workers.channels import Link

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.workers.shards import QueueRoutes
    from django_qless.core.workers.shutdown import WakePipe

__all__ = ["WakeWaiter"]

log = logging.getLogger("django_qless.worker")

_MESSAGE, _SIGNAL, _BROKEN = "message", "signal", "broken"  # what ended a wait
_RECHECK = 1.0  # seconds between looks at the queues' shards while subscribed


class WakeWaiter:
    """The wake-up (and hand-off) subscriptions of a job loop plus the process's wake pipe."""

    def __init__(self, routes: QueueRoutes, pipe: WakePipe, worker: str = "") -> None:
        self.routes = routes
        self.pipe = pipe
        # Hand-offs only with one keyspace: several shards could each hand a job at once.
        self.hand_client: Client | None = routes.single if worker else None
        self.hand_channel = (self.hand_client.keyspace.channel(f"hand:{worker}")
                             if self.hand_client is not None else "")
        self.handed: list[dict[str, Any]] = []
        self.lost = False  # the hand-off subscription broke: hand-offs may have been missed
        self._hub = Hub()  # one connection per node, whatever the shards it holds
        self._links: dict[str | None, Link] = {}
        self._broken_until = 0.0
        self._ready = False  # every wanted subscription confirmed (until one breaks)
        self._recheck_at = 0.0

    @property
    def subscribed(self) -> bool:
        """Tell whether every wake channel (and the hand-off channel) is listened to now."""
        return self._ready and all(link.sub.connected for link in self._links.values())

    def _plan(self) -> dict[str | None, list[str]]:
        """Keep a link per shard to hear (closing the others); return its queues."""
        groups = self.routes.by_shard()
        clients = {c.shard: c for c, _ in groups}
        if (single := self.routes.single) is not None:
            # Listen there even if patterns match nothing yet (and where queues moved).
            clients = {single.shard: single, **clients}
        for tag in set(self._links) - set(clients):
            self._links.pop(tag).close()
        for tag, client in clients.items():
            if tag not in self._links:
                self._links[tag] = Link(client, self._hub)
        return {c.shard: names for c, names in groups}

    def _channels(self, link: Link, queues: list[str]) -> tuple[set[str], set[str]]:
        """Return (channels, patterns) for one keyspace."""
        ks, selection = link.sub.keyspace, self.routes.selection
        if link.sub.sharded is False:
            given = selection.names_given
            channels = {ks.channel(f"wake:{q}") for q in queues if q in given}
            if link.client is self.routes.single:
                channels |= {ks.channel(f"wake:{q}") for q in given}
            patterns = {ks.pattern(f"wake:{p}") for p in selection.patterns}
        else:
            channels, patterns = {ks.channel(f"wake:{q}") for q in queues}, set()
        if link.client is self.hand_client:
            channels.add(self.hand_channel)
        return channels, patterns

    def ensure_subscribed(self) -> None:
        """Subscribe (confirmed) where not done yet; shards re-checked once a second at most."""
        now = time.monotonic()
        if (self._ready and now < self._recheck_at) or now < self._broken_until:
            return
        try:
            queues = self._plan()
        except PUBSUB_ERRORS as exc:  # placements are read from the cluster
            log.warning("could not look up the queues' shards (%s)", exc)
            self._broken_until = now + 1.0
            return
        self._recheck_at = now + _RECHECK
        ready = True
        for tag, link in list(self._links.items()):
            wanted = self._channels(link, queues.get(tag, []))
            if link.sub.connected and (link.sub.channels, link.sub.patterns) == wanted:
                continue
            try:
                self._close(link)
                link.sub.connect()  # (which decides whether the channels are sharded)
                link.subscribe(*self._channels(link, queues.get(tag, [])))
                if not self._replied(link, 5.0):
                    raise redis.TimeoutError("no subscribe confirmation from Redis")
            except PUBSUB_ERRORS as exc:
                log.warning("wake-up subscription failed (%s); polling every interval", exc)
                self._close(link)
                self._broken_until = time.monotonic() + 1.0
                ready = False
        self._ready = ready

    def _replied(self, link: Link, seconds: float) -> bool:
        """Read `link` (taking its messages) until its replies came (True) or `seconds` pass."""
        deadline = time.monotonic() + seconds
        left = 0.0  # (read at once: a break not noticed yet raises)
        while True:
            for msg in link.read(left):
                self._take(msg)
            if not link.awaited:
                return True
            if (left := deadline - time.monotonic()) <= 0:
                return False

    def _close(self, link: Link) -> None:
        if link.sub.connected and link.client is self.hand_client:
            self.lost = True
        self._ready = False
        link.close()

    def close(self) -> None:
        """Drop every pubsub connection (messages sent to them from now on are lost)."""
        for link in self._links.values():
            self._close(link)

    def drain(self) -> None:
        """Consume buffered messages without blocking (wake-ups noted, hand-offs kept)."""
        for link in list(self._links.values()):
            try:
                for msg in link.read():
                    self._take(msg)
            except PUBSUB_ERRORS as exc:
                log.warning("wake-up connection lost (%s); resubscribing", exc)
                self._close(link)

    def _take(self, msg: dict[str, Any]) -> None:
        """Keep a hand-off, or note the queue a wake-up names."""
        channel, data = str(msg.get("channel", "")), msg["data"]
        if channel != self.hand_channel:
            self.routes.selection.note_wake(data if isinstance(data, str) and data
                                            else channel.rpartition("wake:")[2])
            return
        try:
            job = json.loads(data)
        except (TypeError, ValueError):
            log.error("unreadable hand-off message ignored: %.200r", data)
            return
        if isinstance(job, dict) and job.get("jid"):
            self.handed.append(job)

    def stop_hand_offs(self) -> None:
        """Unsubscribe from hand-offs: `handed` is then complete, else `lost` is set."""
        hand = self.hand_client
        link = None if hand is None else self._links.get(hand.shard)
        if link is None or not link.sub.connected:
            return
        try:
            link.unsubscribe([self.hand_channel])
            if self._replied(link, 2.0):
                return
        except PUBSUB_ERRORS as exc:
            log.warning("could not stop hand-offs cleanly (%s)", exc)
        self._close(link)

    def disconnect(self) -> None:
        """Close every pub/sub connection, losing nothing (hand-offs stopped first)."""
        self.stop_hand_offs()
        for link in self._links.values():
            link.close()  # (not _close: with hand-offs stopped cleanly nothing was lost)
        self._ready = False

    def take_handed(self) -> list[dict[str, Any]]:
        """Return the jobs handed to this worker since the last call (job-thread only)."""
        jobs, self.handed = self.handed, []
        return jobs

    def wait(self, timeout: float, keep_waiting: Callable[[], bool] | None = None) -> bool:
        """Block until a message (True), a wake-pipe byte, `timeout`, or `keep_waiting()`
        (asked every second) says no."""
        deadline = time.monotonic() + max(0.0, timeout)
        version = self.routes.version
        while True:
            left = deadline - time.monotonic()
            last = keep_waiting is None or left <= 1.0
            if not self.subscribed:
                # Lost a subscription (connection dropped, failover): get it back first.
                # Once back, a put may have slipped by while we were deaf: reserve again.
                self.ensure_subscribed()
                if self.subscribed:
                    return True
                left = min(left, 1.0)
            woke = self._wait_once(left if last else min(left, 1.0))
            if last or woke or not (keep_waiting and keep_waiting()):
                return _MESSAGE in woke
            # A queue moved shards: listen there too, and reserve again now.
            self.ensure_subscribed()
            if self.routes.version != version:
                return True

    def sockets(self) -> list[int]:
        """Return the subscriptions' sockets, for another thread to poll (never to read)."""
        return [fd for link in list(self._links.values())
                if (fd := link.sub.fileno()) is not None]

    def wait_quietly(self, fd: int, timeout: float) -> bool:
        """Block until `fd` is readable, a signal (True) or `timeout`, sending Redis nothing;
        messages that come meanwhile are read, so they do not pile up on the server."""
        woke = self._wait_once(timeout, fd)
        if woke & {_MESSAGE, _BROKEN}:
            self.drain()
        return _SIGNAL in woke

    def _wait_once(self, timeout: float, *fds: int) -> set[str]:
        """Block once until a message, the wake pipe, `fds` or `timeout`; say what came."""
        socks = set()
        for link in list(self._links.values()):
            try:
                if link.sub.buffered():
                    return {_MESSAGE}  # (read already: poll would not see it)
                sock = link.sub.fileno()
            except PUBSUB_ERRORS as exc:
                log.warning("wake-up connection lost (%s); resubscribing", exc)
                self._close(link)
                return {_BROKEN}  # back to the loop at once: it resubscribes and reserves
            if sock is not None:
                socks.add(sock)
        ready = poll_readable([*socks, *fds, self.pipe.read_fd], max(0.0, timeout))
        woke = set()
        if self.pipe.read_fd in ready:
            self.pipe.drain()
            woke.add(_SIGNAL)
        if not ready.isdisjoint(socks):
            woke.add(_MESSAGE)
        return woke
