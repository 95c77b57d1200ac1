"""The `w:<worker>` channels: what their events mean for a job, and how workers hear them.

`ChildChannels` is polled by the supervisor (no thread: forking a threaded process invites
deadlocks) and, in a thread (`WorkerChannelListener`), by the serial worker. Its connections
(one per primary) are re-made when broken or moved and closed while idle (`settle`).
"""
from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
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
    import redis

    from django_qless.core.client import Client

__all__ = ["ABORT_EVENTS", "ChildChannels", "HeardAborts", "WorkerChannelListener",
           "attempts_still_owned"]

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


def attempts_still_owned(client: Client, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
    """Tell, for each (jid, worker, token), whether that pop still holds the job or ended it
    (the engine records the attempt token with the outcome it accepted)."""
    keyspace = client.keyspace

    def read(conn: redis.Redis) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        for jid, _, _ in attempts:
            pipe.hmget(keyspace.key(f"j:{jid}"), ["state", "worker", "done"])
        return list(pipe.execute())

    rows = client.read(read) if attempts else []
    owned = []
    for (_, worker, token), (state, holder, done) in zip(attempts, rows, strict=True):
        settled = bool(token) and str(done or "").startswith(f"{token} ")
        owned.append((state == "running" and holder == worker) or settled)
    return owned


class HeardAborts:
    """Abort events heard for jobs popped or held but not started yet."""

    def __init__(self) -> None:
        self._heard: dict[str, float] = {}  # jid -> when (dict operations are atomic)

    def note(self, jid: str) -> None:
        """Remember an abort event naming `jid`."""
        now = time.monotonic()
        if len(self._heard) >= _ABORTS_KEPT:
            # A new dict, of the latest: the other thread may read the old one meanwhile.
            fresh = [(j, t) for j, t in self._heard.items() if now - t < _ABORT_MEMORY]
            self._heard = dict(fresh[-(_ABORTS_KEPT - 1):])
        self._heard[jid] = now

    def heard(self, jid: str) -> bool:
        """Tell (once) whether an abort event named `jid` lately."""
        when = self._heard.pop(jid, None)
        return when is not None and time.monotonic() - when < _ABORT_MEMORY

    def __len__(self) -> int:
        return len(self._heard)


class _Shard:
    """The channels' connection in one keyspace, and what its reconnects await."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.prefix = client.keyspace.channel("w:")
        self.sub: Subscription | None = None
        # Per name, the SSUBSCRIBEs of its channel not confirmed yet (a child that dies
        # at once is unsubscribed and its successor subscribed before the first reply).
        self.unconfirmed: dict[str, int] = {}
        self.traffic_at = 0.0
        self.retry_at = 0.0
        self.opened = False
        # Set once a reconnect's channels are confirmed (or after _CONFIRM_WITHIN): events
        # may have been missed. Re-checking before Redis has confirmed could miss an event
        # published between the read and the SSUBSCRIBE.
        self.missed = False
        self.recheck_from = 0.0  # when the reconnect awaiting its confirmations was made

    def close(self) -> None:
        if self.sub is not None:
            self.sub.close()
        self.sub = None


class ChildChannels:
    """Subscribe to the worker channels of the live children in every shard served; poll."""

    def __init__(self, clients: Sequence[Client], health_check_interval: float = 10.0,
                 rest_after: float = 0.0) -> None:
        self.hub = Hub()  # one connection per node, shared by the shards it holds
        self.shards = [_Shard(c) for c in clients]
        self.names: set[str] = set()
        self.health_check_interval = health_check_interval  # a quiet connection is pinged
        self.rest_after = rest_after  # quiet seconds before the connections close (0: never)
        self.resting = False
        self._busy_at = time.monotonic()  # when a child last held a job
        self._sure_from = 0.0  # when the last re-check's window for late starts ends
        self._wake_at = 0.0  # resting, a child holds a job: reopen then

    def settle(self, busy: bool) -> None:
        """Close the connections once no child has held a job for `rest_after` seconds;
        open them again (then re-check the jobs) once one has held a job _WAKE_AFTER s."""
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
        for shard in self.shards:
            shard.retry_at = 0.0
            if resting:
                shard.close()
                shard.recheck_from = 0.0  # no job runs; waking makes a re-check of its own
            else:
                self._open(shard)  # now: the sooner Redis confirms, the sooner jobs are checked

    def follow(self, clients: Sequence[Client]) -> None:
        """Listen in the shards of `clients` (see `ShardFollower`), and no longer in others."""
        wanted = {client.shard for client in clients}
        for shard in [s for s in self.shards if s.client.shard not in wanted]:
            shard.close()  # its channels are unsubscribed on the node's shared connection
            self.shards.remove(shard)
        known = {shard.client.shard for shard in self.shards}
        for client in clients:
            if client.shard not in known:
                known.add(client.shard)
                self.shards.append(_Shard(client))
                if self.names:
                    self._open(self.shards[-1])

    def take_missed(self) -> bool:
        """Tell (once) whether a connection was re-made and Redis has confirmed its channels
        since: events may have been missed, and any later one will be heard."""
        missed = any([shard.missed for shard in self.shards])
        for shard in self.shards:
            shard.missed = False
        if missed:
            self._sure_from = time.monotonic() + _LATE_START
        return missed

    def unsure(self) -> bool:
        """Tell whether a job starting now may have been taken while its events went unheard:
        resting, reconnecting, or just after a re-check (a child reports its start a moment
        after its pop, so a job popped before the re-check may be reported after it)."""
        return self.resting or time.monotonic() < self._sure_from or self.confirming()

    def confirming(self) -> bool:
        """Tell whether a re-made connection still waits for Redis to confirm its channels."""
        return any(bool(shard.recheck_from) or shard.missed for shard in self.shards)

    def add(self, name: str) -> None:
        """Listen for worker `name`."""
        self.names.add(name)
        for shard in self.shards:
            sub = self._open(shard)
            try:
                if sub is not None and sub.subscribe([shard.prefix + name]):
                    shard.unconfirmed[name] = shard.unconfirmed.get(name, 0) + 1
            except PUBSUB_ERRORS as exc:
                self._broken(shard, exc)

    def remove(self, name: str) -> None:
        """Stop listening for worker `name`."""
        self.names.discard(name)
        for shard in self.shards:
            try:
                if shard.sub is not None:
                    shard.sub.unsubscribe([shard.prefix + name])
            except PUBSUB_ERRORS as exc:
                self._broken(shard, exc)

    def listening(self, name: str, *, connected: bool = False) -> bool:
        """Tell whether Redis confirmed `name`'s channel in every shard connected now (a
        shard reconnecting, or resting, is re-checked once back: `take_missed`); with
        `connected`, only if every shard is connected too."""
        return all((shard.sub is None or name not in shard.unconfirmed)
                   and not (connected and self._fileno(shard) is None)
                   for shard in self.shards)

    def filenos(self) -> list[int]:
        """Return the sockets to poll (of the connections up now)."""
        return [fd for shard in self.shards if (fd := self._fileno(shard)) is not None]

    def _fileno(self, shard: _Shard) -> int | None:
        sub = self._open(shard)
        return None if sub is None else sub.fileno()

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the sockets will not report again."""
        return any(shard.sub is not None and shard.sub.buffered() for shard in self.shards)

    def poll(self) -> list[Event]:
        """Return the (worker, payload) events received so far, without blocking."""
        events: list[Event] = []
        for shard in self.shards:
            sub = self._open(shard)
            try:
                if sub is not None:
                    self._read(shard, sub, events)
            except PUBSUB_ERRORS as exc:
                self._broken(shard, exc)
        return events

    def _read(self, shard: _Shard, sub: Subscription, events: list[Event]) -> None:
        """Read what `sub` has, note confirmations, ping it when quiet."""
        while (msg := sub.get(timeout=0.0)) is not None:
            shard.traffic_at = time.monotonic()
            name = str(msg.get("channel", ""))[len(shard.prefix):]
            if Subscription.confirms(msg):
                left = shard.unconfirmed.pop(name, 0) - 1
                if left > 0:
                    shard.unconfirmed[name] = left
            if msg.get("type") not in MESSAGE_TYPES:
                continue
            try:
                payload = json.loads(msg.get("data") or "{}")
            except (TypeError, ValueError):
                continue
            if isinstance(payload, dict):
                events.append((name, payload))
        if shard.recheck_from and (not shard.unconfirmed or
                                   time.monotonic() - shard.recheck_from >= _CONFIRM_WITHIN):
            shard.recheck_from = 0.0
            shard.missed = True
        if time.monotonic() - shard.traffic_at >= self.health_check_interval:
            sub.ping()
            shard.traffic_at = time.monotonic()

    def _open(self, shard: _Shard) -> Subscription | None:
        """Return the shard's subscription, made now unless resting or backing off."""
        if shard.sub is not None or self.resting or time.monotonic() < shard.retry_at:
            return shard.sub
        sub = Subscription(shard.client, self.hub)
        try:
            # No name yet: a placeholder keeps the connection in pubsub mode.
            sub.subscribe([shard.prefix + n for n in self.names] or [shard.prefix + "-"])
        except PUBSUB_ERRORS as exc:
            sub.close()
            log.warning("supervisor pubsub unavailable (%s); retrying", exc)
            shard.retry_at = time.monotonic() + 1.0
            return None
        shard.sub, shard.unconfirmed = sub, dict.fromkeys(self.names, 1)
        shard.traffic_at = time.monotonic()
        if shard.opened:
            shard.recheck_from = time.monotonic()
        shard.opened = True
        return sub

    def _broken(self, shard: _Shard, exc: BaseException) -> None:
        log.warning("supervisor pubsub connection lost (%s); reconnecting", exc)
        shard.close()
        shard.retry_at = 0.0  # at once; _open backs off only if reconnecting fails

    def close(self) -> None:
        """Drop the connections."""
        for shard in self.shards:
            shard.close()
        self.hub.close()


class WorkerChannelListener(threading.Thread):
    """A daemon thread hearing the serial worker's channel in every keyspace `shards()` names
    (asked in this thread only, each round): `on_event(worker, payload)` for each message,
    `on_reconnect()` once a broken connection is back and confirmed (events may be lost)."""

    def __init__(self, shards: Callable[[], Sequence[Client]],
                 on_event: Callable[[str, dict[str, Any]], None], *,
                 on_reconnect: Callable[[], None] | None = None) -> None:
        super().__init__(name="qless-worker-listener", daemon=True)
        self.shards = shards
        self.on_event = on_event
        self.on_reconnect = on_reconnect
        self._lock = threading.Lock()
        self._wanted: dict[str, threading.Event] = {}  # name -> set once heard everywhere
        self._changed = threading.Event()
        self._stop_event = threading.Event()

    def add(self, worker: str, wait: float = 5.0) -> bool:
        """Listen for `worker`; wait until Redis confirmed it everywhere (True) or `wait`."""
        with self._lock:
            event = self._wanted.setdefault(worker, threading.Event())
        self._changed.set()
        return self.is_alive() and event.wait(wait)

    def stop(self) -> None:
        """End the thread (it leaves within about a fifth of a second)."""
        self._stop_event.set()
        self._changed.set()

    def run(self) -> None:
        block_async_signals()
        channels = ChildChannels([])
        try:
            while not self._stop_event.is_set():
                self._round(channels)
        finally:
            channels.close()

    def _round(self, channels: ChildChannels) -> None:
        """Follow the shards and names wanted, wait up to 0.2 s, hand on what came."""
        try:
            channels.follow(list(self.shards()))
        except Exception as exc:  # noqa: BLE001 - placements are read from Redis
            log.warning("could not look up the queues' shards (%s)", exc)
        with self._lock:
            wanted = dict(self._wanted)
        for name in wanted.keys() - channels.names:
            channels.add(name)
        fds = channels.filenos()
        if not channels.buffered():
            if fds:
                poll_readable(fds, 0.2)
            else:
                self._changed.wait(0.2)
        self._changed.clear()
        for worker, payload in channels.poll():
            try:
                self.on_event(worker, payload)
            except Exception:
                log.exception("worker-channel event handler failed for %r", payload)
        if channels.take_missed() and self.on_reconnect is not None:
            try:
                self.on_reconnect()
            except Exception:
                log.exception("re-check after reconnect failed")
        for name, heard in wanted.items():
            if (channels.shards and channels.listening(name, connected=True)
                    and not channels.confirming()):
                heard.set()
            else:
                heard.clear()
