"""The worker's subscriptions: `Link`, one keyspace's (for wake-ups too: wakeup.py); the
`w:<worker>` channels, what their events mean for a job, and `ChildChannels`, which hears
them, polled by the supervisor (no thread: forking a threaded process invites deadlocks)
and, in a thread (`WorkerChannelListener`), by the serial worker.
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from django_qless.core.engine.pubsub import (
    MESSAGE_TYPES,
    PUBSUB_ERRORS,
    Hub,
    Subscription,
    block_async_signals,
    poll_readable,
)

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ABORT_EVENTS", "ChildChannels", "HeardAborts", "Link", "WorkerChannelListener"]

log = logging.getLogger("django_qless.worker")

# Each means the job's result would be refused (the channel also carries `quiet` and `stop`).
ABORT_EVENTS = frozenset({"lock_lost", "canceled", "put"})
# How long, and for how many jobs, an abort event naming a job not started yet is kept.
_ABORT_MEMORY = 30.0
_ABORTS_KEPT = 64
# A job started while resting reopens the channels this long after its start is read: the
# child starts it meanwhile instead of sharing the CPU with our reconnect (its events are
# not lost: the re-check after the reconnect reads them in Redis).
_WAKE_AFTER = 0.005
# After a reconnect, re-check the jobs this long at the latest if a confirmation is missing.
_CONFIRM_WITHIN = 5.0
# A job whose start is reported this long after a re-check is re-checked on its own too.
_LATE_START = 2.0

Event = tuple[str, dict[str, Any]]


class HeardAborts:
    """Abort events heard for jobs popped or held but not started yet."""

    def __init__(self) -> None:
        self._heard: dict[str, float] = {}  # jid -> when (dict operations are atomic)

    def note(self, jid: str) -> None:
        """Remember an abort event naming `jid`."""
        if len(self._heard) >= _ABORTS_KEPT:
            # A new dict, of the latest: the other thread may read the old one meanwhile.
            self._heard = dict(list(self._heard.items())[1 - _ABORTS_KEPT:])
        self._heard[jid] = time.monotonic()

    def heard(self, jid: str) -> bool:
        """Tell (once) whether an abort event named `jid` lately."""
        when = self._heard.pop(jid, None)
        return when is not None and time.monotonic() - when < _ABORT_MEMORY

    def __len__(self) -> int:
        return len(self._heard)


class Link:
    """One keyspace's subscription: its channels, the replies awaited, the messages read."""

    def __init__(self, client: Client, hub: Hub) -> None:
        self.client = client
        self.sub = Subscription(client, hub)
        # Channel or pattern -> replies still to come (counted: a child that dies at once is
        # unsubscribed and its successor, of the same name, subscribed before the first reply).
        self.awaited: Counter[str] = Counter()
        self.heard_at = 0.0  # when it last read something (a quiet one is pinged)
        self.retry_at = 0.0  # an open that failed is tried again then
        self.opened = False
        # Reopened, events may have been missed: look at the jobs again once Redis has
        # confirmed the channels (`missed`), not before: an event published between that
        # look and the SUBSCRIBE would be missed too.
        self.reopened_at = 0.0
        self.missed = False

    def subscribe(self, channels: Iterable[str], patterns: Iterable[str] = ()) -> None:
        """Subscribe to those not subscribed yet (connecting first if needed)."""
        channels, patterns = set(channels), set(patterns)
        new = [*(channels - self.sub.channels), *(patterns - self.sub.patterns)]
        self.sub.subscribe(channels, patterns)
        self.awaited.update(new)

    def unsubscribe(self, channels: Iterable[str]) -> None:
        """Unsubscribe from `channels`."""
        gone = set(channels) & self.sub.channels
        self.sub.unsubscribe(gone)
        self.awaited.update(gone)

    def read(self, timeout: float = 0.0) -> Iterator[dict[str, Any]]:
        """Yield the messages come, waiting up to `timeout` for the first reply (a break
        raises one of PUBSUB_ERRORS)."""
        while (msg := self.sub.get(timeout)) is not None:
            timeout = 0.0
            self.heard_at = time.monotonic()
            if msg["type"] in MESSAGE_TYPES:
                yield msg
            elif (name := str(msg.get("channel", ""))) in self.awaited:
                self.awaited[name] -= 1
                if self.awaited[name] <= 0:
                    del self.awaited[name]

    def close(self) -> None:
        """Leave the connection (messages sent from now on are lost)."""
        self.sub.close()
        # A new view: replies to what the old one sent must not count for the next open.
        old, self.sub = self.sub, Subscription(self.client, self.sub.hub)
        self.sub.sharded = old.sharded
        self.awaited.clear()


class ChildChannels:
    """The worker channels of the live children in every shard served, polled; reopened
    when broken or moved, closed while idle (`settle`)."""

    def __init__(self, clients: Sequence[Client], health_check_interval: float = 10.0,
                 rest_after: float = 0.0) -> None:
        self.hub = Hub()
        self.links = [Link(c, self.hub) for c in clients]
        self.names: set[str] = set()
        self.health_check_interval = health_check_interval  # a quiet connection is pinged
        self.rest_after = rest_after  # quiet seconds before the connections close (0: never)
        self.resting = False
        self._busy_at = time.monotonic()  # when a child last held a job
        self._sure_from = 0.0  # when the last re-check's window for late starts ends
        self._wake_at = 0.0  # resting, a child holds a job: reopen then

    def settle(self, busy: bool) -> None:
        """Close the connections after `rest_after` s without a job; reopen them once a
        child has held one for _WAKE_AFTER s (the jobs are then re-checked)."""
        now = time.monotonic()
        if busy:
            self._busy_at = now
            if self.resting and not self._wake_at:
                self._wake_at = now + _WAKE_AFTER
            elif self.resting and now >= self._wake_at:
                self._rest(False)
        elif self.resting:
            self._wake_at = 0.0  # the job is over: nothing to hear
        elif 0 < self.rest_after <= now - self._busy_at:
            self._rest(True)

    def wake_in(self) -> float:
        """Return how long until the channels are due to reopen (infinity: not due)."""
        return max(0.0, self._wake_at - time.monotonic()) if self._wake_at else float("inf")

    def _rest(self, resting: bool) -> None:
        self.resting, self._wake_at = resting, 0.0
        log.debug("supervisor pubsub %s", "closed while idle" if resting else "reopened")
        for link in self.links:
            link.retry_at = 0.0
            if resting:
                link.close()
                link.reopened_at = 0.0  # no job runs; waking makes a re-check of its own
            else:
                self._open(link)  # now: the sooner Redis confirms, the sooner jobs are checked

    def follow(self, clients: Sequence[Client]) -> None:
        """Listen in the shards of `clients` (see `ShardFollower`), and no longer in others."""
        wanted = {client.shard for client in clients}
        for link in [link for link in self.links if link.client.shard not in wanted]:
            link.close()  # its channels are unsubscribed on the node's shared connection
            self.links.remove(link)
        known = {link.client.shard for link in self.links}
        for client in clients:
            if client.shard not in known:
                known.add(client.shard)
                self.links.append(Link(client, self.hub))
                if self.names:
                    self._open(self.links[-1])

    def take_missed(self) -> bool:
        """Tell (once) whether a reopened connection's channels are confirmed since: events
        may have been missed, and any later one will be heard."""
        missed = any([link.missed for link in self.links])
        for link in self.links:
            link.missed = False
        if missed:
            self._sure_from = time.monotonic() + _LATE_START
        return missed

    def unsure(self) -> bool:
        """Tell whether a job starting now may have been taken while its events went unheard:
        resting, reconnecting, or just after a re-check (a child reports its start a moment
        after its pop, so a job popped before the re-check may be reported after it)."""
        return self.resting or time.monotonic() < self._sure_from or self.confirming()

    def confirming(self) -> bool:
        """Tell whether a reopened connection still waits for Redis to confirm its channels."""
        return any(bool(link.reopened_at) or link.missed for link in self.links)

    def add(self, name: str) -> None:
        """Listen for worker `name`."""
        self.names.add(name)
        for link in self.links:
            try:
                if self._open(link):
                    link.subscribe([self._channel(link, name)])
            except PUBSUB_ERRORS as exc:
                self._broken(link, exc)

    def remove(self, name: str) -> None:
        """Stop listening for worker `name`."""
        self.names.discard(name)
        for link in self.links:
            try:
                link.unsubscribe([self._channel(link, name)])
            except PUBSUB_ERRORS as exc:
                self._broken(link, exc)

    def listening(self, name: str, *, connected: bool = False) -> bool:
        """Tell whether Redis confirmed `name`'s channel in every shard connected now (one
        reconnecting is re-checked once back); with `connected`, only if all are."""
        return all(self._channel(link, name) not in link.awaited
                   and not (connected and self._fileno(link) is None) for link in self.links)

    def filenos(self) -> list[int]:
        """Return the sockets to poll (of the connections up now)."""
        return [fd for link in self.links if (fd := self._fileno(link)) is not None]

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the sockets will not report again."""
        return any(link.sub.buffered() for link in self.links)

    def poll(self) -> list[Event]:
        """Return the (worker, payload) events received so far, without blocking."""
        events: list[Event] = []
        for link in self.links:
            try:
                if self._open(link):
                    self._read(link, events)
            except PUBSUB_ERRORS as exc:
                self._broken(link, exc)
        return events

    def _read(self, link: Link, events: list[Event]) -> None:
        """Read what `link` has, note a reopen confirmed, ping it when quiet."""
        prefix = len(self._channel(link, ""))
        for msg in link.read():
            try:
                payload = json.loads(msg.get("data") or "{}")
            except (TypeError, ValueError):
                continue
            if isinstance(payload, dict):
                events.append((str(msg.get("channel", ""))[prefix:], payload))
        now = time.monotonic()
        if link.reopened_at and (not link.awaited or now - link.reopened_at >= _CONFIRM_WITHIN):
            link.reopened_at, link.missed = 0.0, True
        if now - link.heard_at >= self.health_check_interval:
            link.sub.ping()
            link.heard_at = now

    @staticmethod
    def _channel(link: Link, name: str) -> str:
        return link.client.keyspace.channel(f"w:{name}")

    def _fileno(self, link: Link) -> int | None:
        return link.sub.fileno() if self._open(link) else None

    def _open(self, link: Link) -> bool:
        """Tell whether `link` is open, opening it now unless resting or backing off."""
        if link.sub.connected or self.resting or time.monotonic() < link.retry_at:
            return link.sub.connected
        try:
            # No name yet: a placeholder keeps the connection in pubsub mode.
            link.subscribe([self._channel(link, n) for n in self.names or ["-"]])
        except PUBSUB_ERRORS as exc:
            link.close()
            log.warning("supervisor pubsub unavailable (%s); retrying", exc)
            link.retry_at = time.monotonic() + 1.0
            return False
        link.heard_at = time.monotonic()
        if link.opened:
            link.reopened_at = link.heard_at
        link.opened = True
        return True

    def _broken(self, link: Link, exc: BaseException) -> None:
        log.warning("supervisor pubsub connection lost (%s); reconnecting", exc)
        link.close()
        link.retry_at = 0.0  # at once; _open backs off only if reconnecting fails

    def close(self) -> None:
        """Drop the connections."""
        for link in self.links:
            link.close()
        self.hub.close()


class WorkerChannelListener(threading.Thread):
    """A daemon thread polling `ChildChannels` for the serial worker's `w:<worker>` in the
    shards `shards()` names (asked in this thread only), calling `on_event` and
    `on_reconnect` (take_missed)."""

    def __init__(self, worker: str, shards: Callable[[], Sequence[Client]],
                 on_event: Callable[[str, dict[str, Any]], None], *,
                 on_reconnect: Callable[[], None]) -> None:
        super().__init__(name="qless-worker-listener", daemon=True)
        self.worker = worker
        self.shards = shards
        self.on_event = on_event
        self.on_reconnect = on_reconnect
        self.confirmed = threading.Event()  # set while Redis confirms the channel everywhere
        self._stop_event = threading.Event()

    def listen(self, wait: float = 5.0) -> bool:
        """Start; wait until Redis confirmed the channel everywhere (True) or `wait` s."""
        self.start()
        return self.confirmed.wait(wait)

    def stop(self) -> None:
        """End the thread (it leaves within about a fifth of a second)."""
        self._stop_event.set()

    def run(self) -> None:
        block_async_signals()
        channels = ChildChannels([])
        channels.add(self.worker)  # (subscribed in each shard as `follow` opens it)
        try:
            while not self._stop_event.is_set():
                self._round(channels)
        finally:
            channels.close()

    def _round(self, channels: ChildChannels) -> None:
        """Follow the shards, wait up to 0.2 s, hand on what came."""
        try:
            channels.follow(list(self.shards()))
        except Exception as exc:  # noqa: BLE001 - placements are read from Redis
            log.warning("could not look up the queues' shards (%s)", exc)
        fds = channels.filenos()
        if not channels.buffered():
            if fds:
                poll_readable(fds, 0.2)
            else:
                self._stop_event.wait(0.2)  # (no connection: nothing to subscribe either)
        for worker, payload in channels.poll():
            try:
                self.on_event(worker, payload)
            except Exception:
                log.exception("worker-channel event handler failed for %r", payload)
        if channels.take_missed():
            try:
                self.on_reconnect()
            except Exception:
                log.exception("re-check after reconnect failed")
        if (channels.links and channels.listening(self.worker, connected=True)
                and not channels.confirming()):
            self.confirmed.set()
        else:
            self.confirmed.clear()
