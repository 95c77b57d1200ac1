"""What the supervisor tracks per child, and the `w:<worker>` channels (`ChildChannels`: the
one way workers hear them, polled by the supervisor, in a thread by the serial worker).

No thread in the supervisor (forking a threaded process invites deadlocks): its pubsub
sockets, one per primary (engine/pubsub.py), are polled with its other descriptors, re-made
when broken or moved, pinged when quiet. After --idle-disconnect seconds with no job held
they are closed (`settle`); reopened, like a broken one, the running jobs are re-checked in
Redis once every channel is confirmed again (`take_missed`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django_qless.core.engine.pubsub import (
    MESSAGE_TYPES,
    PUBSUB_ERRORS,
    Hub,
    Subscription,
    block_async_signals,
    poll_readable,
)
from django_qless.core.workers.listener import HeardAborts

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ChildChannels", "ChildProc", "WorkerChannelListener"]

log = logging.getLogger("django_qless.worker")

# A job started while resting reopens the channels this long after its start is read: the
# child starts it meanwhile instead of sharing the CPU with our reconnect (the job's events
# are not lost: the re-check after the reconnect reads them in Redis).
_WAKE_AFTER = 0.005
# After a reconnect, re-check the jobs this long at the latest if a confirmation is missing.
_CONFIRM_WITHIN = 5.0
# A job whose start is reported this long after a re-check is re-checked on its own too.
_LATE_START = 2.0


@dataclass
class ChildProc:
    """What the supervisor knows about one child."""

    slot: int
    pid: int
    name: str
    status_fd: int
    started: float = field(default_factory=time.monotonic)
    jid: str | None = None
    token: str | None = None  # the attempt token of `jid`'s pop (see attempts_still_owned)
    klass: str | None = None
    queue: str | None = None
    job_started: float = 0.0
    limit: float = 0.0  # `jid`'s hard time limit in seconds (0: none), from its start line
    kill_reason: str | None = None
    term_sent: float = 0.0
    left: str | None = None  # why the child says it leaves on its own (status line `x`)
    buffer: bytes = b""
    go_fd: int = -1  # the pipe that lets the child take jobs, until written (see listening)
    unsure: bool = False  # its job started while its channel may not have been heard
    # Abort events heard for jobs it had not reported starting (popped, or held ahead).
    aborted: HeardAborts = field(default_factory=HeardAborts)


class ChildChannels:
    """Subscribe to the worker channels of the live children in every shard served; poll."""

    def __init__(
        self, clients: Sequence[Client], health_check_interval: float = 10.0,
        rest_after: float = 0.0,
    ) -> None:
        self.hub = Hub()  # one connection per node, shared by the shards it holds
        self.shards = [_ShardChannels(c, health_check_interval, self.hub) for c in clients]
        self.names: set[str] = set()
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
        self.resting = resting
        self._wake_at = 0.0
        log.debug("supervisor pubsub %s", "closed while idle" if resting else "reopened")
        for shard in self.shards:
            shard.rest(resting)

    def follow(self, clients: Sequence[Client]) -> None:
        """Listen in the shards of `clients` (a served queue moved there) and no longer in
        the others (`ShardFollower` keeps a shard while a child's job there may run)."""
        wanted = {client.shard for client in clients}
        for shard in [s for s in self.shards if s.client.shard not in wanted]:
            shard.close()  # its channels are unsubscribed on the node's shared connection
            self.shards.remove(shard)
        known = {shard.client.shard for shard in self.shards}
        for client in clients:
            if client.shard in known:
                continue
            known.add(client.shard)
            shard = _ShardChannels(client, self.health_check_interval, self.hub)
            shard.resting = self.resting
            self.shards.append(shard)
            for name in self.names:
                shard.add(name)

    @property
    def health_check_interval(self) -> float:
        """Return how long a quiet connection goes before it is pinged."""
        return self.shards[0].health_check_interval if self.shards else 10.0

    @health_check_interval.setter
    def health_check_interval(self, seconds: float) -> None:
        for shard in self.shards:
            shard.health_check_interval = seconds

    def take_missed(self) -> bool:
        """Tell (once) whether a connection was re-made and Redis has confirmed its channels
        since: events may have been missed, and any later one will be heard."""
        missed = False
        for shard in self.shards:
            missed = shard.missed_events or missed
            shard.missed_events = False
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
        return any(shard.confirming() for shard in self.shards)

    def add(self, name: str) -> None:
        """Listen for worker `name`."""
        self.names.add(name)
        for shard in self.shards:
            shard.add(name)

    def remove(self, name: str) -> None:
        """Stop listening for worker `name`."""
        self.names.discard(name)
        for shard in self.shards:
            shard.remove(name)

    def listening(self, name: str, *, connected: bool = False) -> bool:
        """Tell whether Redis confirmed `name`'s channel in every shard connected now (a
        shard reconnecting, or resting, is re-checked once back: `take_missed`); with
        `connected`, only if every shard is connected too."""
        return all(shard.listening(name) and not (connected and shard.fileno() is None)
                   for shard in self.shards)

    def filenos(self) -> list[int]:
        """Return the sockets to poll (of the connections up now)."""
        return [fd for shard in self.shards if (fd := shard.fileno()) is not None]

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the sockets will not report again."""
        return any(shard.buffered() for shard in self.shards)

    def poll(self) -> list[tuple[str, dict[str, Any]]]:
        """Return the (worker, payload) events received so far, without blocking."""
        return [event for shard in self.shards for event in shard.poll()]

    def close(self) -> None:
        """Drop the connections."""
        for shard in self.shards:
            shard.close()
        self.hub.close()


class WorkerChannelListener(threading.Thread):
    """A daemon thread hearing the channels of worker names (the serial worker's own) in every
    keyspace `shards()` names (asked in this thread only, each round), through ChildChannels:
    `on_event(worker, payload)` for each message; `on_reconnect()` once a broken connection
    is back and confirmed (events may have been missed meanwhile)."""

    def __init__(
        self,
        shards: Callable[[], Sequence[Client]],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="qless-worker-listener", daemon=True)
        self.shards = shards
        self.on_event = on_event
        self.on_reconnect = on_reconnect
        self._lock = threading.Lock()
        self._wanted: dict[str, threading.Event] = {}  # name -> set once heard everywhere
        self._changed = threading.Event()
        self._stop_event = threading.Event()

    def add(self, worker: str, wait: float = 5.0) -> bool:
        """Listen for `worker`; wait until Redis confirmed it everywhere (True) or `wait`
        passed: no event is lost between "job started" and "listening"."""
        with self._lock:
            event = self._wanted.setdefault(worker, threading.Event())
        self._changed.set()
        return self.is_alive() and event.wait(wait)

    def remove(self, worker: str) -> None:
        """Stop listening for `worker`."""
        with self._lock:
            self._wanted.pop(worker, None)
        self._changed.set()

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
        for name in channels.names - wanted.keys():
            channels.remove(name)
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


class _ShardChannels:
    """The children's channels in one keyspace: one connection, re-made when it breaks."""

    def __init__(self, client: Client, health_check_interval: float, hub: Hub) -> None:
        self.client = client
        self.hub = hub
        self.prefix = client.keyspace.channel("w:")
        self.health_check_interval = health_check_interval
        self.names: set[str] = set()
        # Per name, the SSUBSCRIBEs of its channel not confirmed yet (a child that dies
        # at once is unsubscribed and its successor subscribed before the first reply).
        self._unconfirmed: dict[str, int] = {}
        self._sub: Subscription | None = None
        self._last_traffic = time.monotonic()
        self._retry_at = 0.0
        self._connected_once = False
        # Set once a reconnect's channels are confirmed (or after _CONFIRM_WITHIN): events
        # may have been missed, the caller re-checks jobs. Re-checking before Redis has
        # confirmed could miss an event published between the read and the SSUBSCRIBE.
        self.missed_events = False
        self._recheck_from = 0.0  # when the reconnect awaiting its confirmations was made
        self.resting = False  # closed while the worker is idle: not reopened until woken

    def rest(self, resting: bool) -> None:
        """Close the connection and keep it closed (`resting`), or let it reopen."""
        self.resting = resting
        self._retry_at = 0.0
        if resting:
            self.close()
            self._recheck_from = 0.0  # no job runs; waking makes a re-check of its own
        else:
            self._ensure()  # now: the sooner Redis confirms, the sooner the jobs are checked

    def _ensure(self) -> Subscription | None:
        if self._sub is not None or self.resting or time.monotonic() < self._retry_at:
            return self._sub
        sub = Subscription(self.client, self.hub)
        try:
            # No name yet: a placeholder keeps the connection in pubsub mode.
            sub.subscribe([self.prefix + n for n in self.names] or [self.prefix + "-"])
        except PUBSUB_ERRORS as exc:
            sub.close()
            log.warning("supervisor pubsub unavailable (%s); retrying", exc)
            self._retry_at = time.monotonic() + 1.0
            return None
        self._sub = sub
        self._unconfirmed = dict.fromkeys(self.names, 1)
        self._last_traffic = time.monotonic()
        if self._connected_once:
            self._recheck_from = time.monotonic()
        self._connected_once = True
        return sub

    def confirming(self) -> bool:
        """Tell whether the re-check of a reconnect waits for Redis's confirmations."""
        return bool(self._recheck_from) or self.missed_events

    def _check_confirmed(self) -> None:
        """Ask for the re-check once Redis has confirmed every channel of the reconnect."""
        if self._recheck_from and (not self._unconfirmed or
                                   time.monotonic() - self._recheck_from >= _CONFIRM_WITHIN):
            self._recheck_from = 0.0
            self.missed_events = True

    def _broken(self, exc: BaseException) -> None:
        log.warning("supervisor pubsub connection lost (%s); reconnecting", exc)
        self.close()
        self._retry_at = 0.0  # at once; _ensure backs off only if reconnecting fails

    def add(self, name: str) -> None:
        """Listen for worker `name`."""
        self.names.add(name)
        sub = self._ensure()
        if sub is None:
            return
        try:
            if sub.subscribe([self.prefix + name]):
                self._unconfirmed[name] = self._unconfirmed.get(name, 0) + 1
        except PUBSUB_ERRORS as exc:
            self._broken(exc)

    def listening(self, name: str) -> bool:
        """Tell whether `name`'s channel is confirmed here (or the shard is not connected)."""
        return self._sub is None or name not in self._unconfirmed

    def _confirmed(self, name: str) -> None:
        left = self._unconfirmed.get(name, 0) - 1
        if left > 0:
            self._unconfirmed[name] = left
        else:
            self._unconfirmed.pop(name, None)

    def remove(self, name: str) -> None:
        """Stop listening for worker `name`."""
        self.names.discard(name)
        if self._sub is None:
            return
        try:
            self._sub.unsubscribe([self.prefix + name])
        except PUBSUB_ERRORS as exc:
            self._broken(exc)

    def fileno(self) -> int | None:
        """Return the socket to poll, if connected."""
        sub = self._ensure()
        return None if sub is None else sub.fileno()

    def buffered(self) -> bool:
        """Tell whether redis-py has already read data the socket will not report again."""
        return self._sub is not None and self._sub.buffered()

    def poll(self) -> list[tuple[str, dict[str, Any]]]:
        """Return the (worker, payload) events received so far, without blocking."""
        sub = self._ensure()
        events: list[tuple[str, dict[str, Any]]] = []
        if sub is None:
            return events
        try:
            while True:
                msg = sub.get(timeout=0.0)
                if msg is None:
                    break
                self._last_traffic = time.monotonic()
                if Subscription.confirms(msg):
                    self._confirmed(str(msg.get("channel", ""))[len(self.prefix):])
                if msg.get("type") not in MESSAGE_TYPES:
                    continue
                channel = str(msg.get("channel", ""))
                try:
                    payload = json.loads(msg.get("data") or "{}")
                except (TypeError, ValueError):
                    continue
                if isinstance(payload, dict):
                    events.append((channel[len(self.prefix):], payload))
            self._check_confirmed()
            if time.monotonic() - self._last_traffic >= self.health_check_interval:
                sub.ping()
                self._last_traffic = time.monotonic()
        except PUBSUB_ERRORS as exc:
            self._broken(exc)
        return events

    def close(self) -> None:
        """Drop the connection."""
        if self._sub is not None:
            self._sub.close()
        self._sub = None
