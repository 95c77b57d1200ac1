"""Listen on `w:<worker>` for events that take a running job away from its worker.

One thread for every keyspace the worker serves, on one connection per node (node_pubsub.py:
a shard's channel is heard on its primary; after a failover or a slot move that shard
resubscribes on its new primary). The shards listened to are asked for again every second
(`shards`), so a queue moved to another shard is heard there too. The engine publishes
`lock_lost` (the lease expired and the job was offered elsewhere, or it was timed out, or
re-put by someone else), `canceled` and `put` there. Each is a reason to stop the job at
once: its result would be refused anyway. `add()` returns only once Redis has confirmed the
subscription in every shard (no event lost between "job started" and "listening").
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from django_qless.core.cluster.node_pubsub import PUBSUB_ERRORS, Hub, Subscription, poll_readable
from django_qless.core.signalmask import block_async_signals

if TYPE_CHECKING:
    import redis

    from django_qless.core.client import Client

__all__ = ["ABORT_EVENTS", "HeardAborts", "WorkerChannelListener", "attempts_still_owned"]

log = logging.getLogger("django_qless.worker")

ABORT_EVENTS = frozenset({"lock_lost", "canceled", "put"})
_RETRY = 1.0  # a shard whose subscription failed is tried again after this long
# How long, and for how many jobs, an abort event naming a job not running yet is kept: a
# job starts within a round trip of its pop, or after the job before it (one held ahead is
# handed back once that one passes 0.1 s); a supervisor reads status lines in batches.
_ABORT_MEMORY = 30.0
_ABORTS_KEPT = 64


def attempts_still_owned(client: Client, attempts: Sequence[tuple[str, str, str]]) -> list[bool]:
    """Tell, for each (jid, worker, token), whether that pop still holds the job or ended it.

    A worker's own view of its job lags behind Redis (a child reports the end of a job after
    it sent the completion), so "not running for this worker" alone cannot tell a job taken
    away from one the worker has just completed, failed or retried itself. The engine records
    the attempt token with the outcome it accepted, which settles the question in one read.
    `client` is the jobs' keyspace (their shard's client).
    """
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
    """Abort events heard for jobs not running yet: popped (the reply on its way, or the
    start not reported yet) or held ahead. Such a job may start yet; when it does, Redis is
    asked whether the attempt still holds it (`attempts_still_owned`, by attempt token, so a
    job popped again after the event is not taken for the one it named)."""

    def __init__(self) -> None:
        self._heard: dict[str, float] = {}  # jid -> when (dict operations are atomic)

    def note(self, jid: str) -> None:
        """Remember an abort event naming `jid`."""
        now = time.monotonic()
        heard = self._heard
        if len(heard) >= _ABORTS_KEPT:
            heard = {j: t for j, t in heard.items() if now - t < _ABORT_MEMORY}
            while len(heard) >= _ABORTS_KEPT:
                del heard[next(iter(heard))]  # (the oldest)
            self._heard = heard
        heard[jid] = now

    def heard(self, jid: str) -> bool:
        """Tell (once) whether an abort event named `jid` lately."""
        when = self._heard.pop(jid, None)
        return when is not None and time.monotonic() - when < _ABORT_MEMORY

    def __len__(self) -> int:
        return len(self._heard)


class WorkerChannelListener(threading.Thread):
    """A daemon thread subscribed to the channels of one or more worker names in every
    keyspace `shards()` names (called in this thread only)."""

    def __init__(
        self,
        shards: Callable[[], Sequence[Client]],
        on_event: Callable[[str, dict[str, Any]], None],
        *,
        health_check_interval: float = 10.0,
        on_reconnect: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(name="qless-worker-listener", daemon=True)
        self.shards = shards
        self.on_event = on_event
        self.health_check_interval = health_check_interval
        # Called once re-subscribed after a dropped connection: events may have been missed.
        self.on_reconnect = on_reconnect
        self._lock = threading.Lock()
        self._wanted: set[str] = set()
        self._confirmed: dict[str, threading.Event] = {}
        self._stop_event = threading.Event()
        self._changed = threading.Event()
        self._hub = Hub()
        self._subs: dict[str | None, Subscription] = {}
        self._pending: dict[str | None, set[str]] = {}  # per shard: names not confirmed yet
        self._retry_at: dict[str | None, float] = {}
        self._lost_once = False  # a subscription broke: re-check the job once back

    # -- public API -----------------------------------------------------------------------
    def add(self, worker: str, wait: float = 5.0) -> bool:
        """Listen for `worker`; wait until subscribed everywhere (True) or `wait` passed."""
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
        last_ping = time.monotonic()
        try:
            while not self._stop_event.is_set():
                self._sync()
                fds = [fd for sub in self._subs.values() if (fd := sub.fileno()) is not None]
                if any(sub.buffered() for sub in self._subs.values()):
                    fds = []
                elif fds:
                    poll_readable(fds, 0.2)
                else:
                    self._changed.wait(0.2)
                self._changed.clear()
                for tag, sub in list(self._subs.items()):
                    self._read(tag, sub)
                if time.monotonic() - last_ping >= self.health_check_interval:
                    # Half-open sockets deliver nothing and raise nothing: probe them.
                    last_ping = time.monotonic()
                    for tag, sub in list(self._subs.items()):
                        try:
                            sub.ping()
                        except PUBSUB_ERRORS as exc:
                            self._broken(tag, exc)
        finally:
            for sub in self._subs.values():
                sub.close()
            self._hub.close()

    def _sync(self) -> None:
        """Subscribe the wanted names in every shard followed (new shards, re-made ones)."""
        try:
            clients = list(self.shards())
        except Exception as exc:  # noqa: BLE001 - placements are read from Redis
            log.warning("could not look up the queues' shards (%s)", exc)
            clients = [sub.client for sub in self._subs.values()]
        with self._lock:
            wanted = set(self._wanted)
        followed = {client.shard for client in clients}
        for tag in [t for t in self._subs if t not in followed]:  # no longer followed
            self._subs.pop(tag).close()
            self._pending.pop(tag, None)
            self._retry_at.pop(tag, None)
        now = time.monotonic()
        for client in clients:
            tag = client.shard
            sub = self._subs.get(tag)
            if sub is None:
                sub = self._subs[tag] = Subscription(client, self._hub)
            if self._retry_at.get(tag, 0.0) > now:
                continue
            prefix = client.keyspace.channel("w:")
            channels = {prefix + w for w in wanted}
            try:
                if not sub.connected and channels:
                    sub.connect()
                add = channels - sub.channels
                if add:
                    self._pending.setdefault(tag, set()).update(add)
                    sub.subscribe(add)
                if sub.channels - channels:
                    sub.unsubscribe(sub.channels - channels)
            except PUBSUB_ERRORS as exc:
                self._broken(tag, exc)
        self._settle()

    def _read(self, tag: str | None, sub: Subscription) -> None:
        try:
            while (msg := sub.get(timeout=0.0)) is not None:
                self._handle(tag, sub, msg)
        except PUBSUB_ERRORS as exc:
            self._broken(tag, exc)

    def _broken(self, tag: str | None, exc: BaseException) -> None:
        if self._stop_event.is_set():
            return
        log.warning("worker-channel listener lost its subscription (%s); reconnecting", exc)
        sub = self._subs.get(tag)
        if sub is not None:
            sub.close()
        self._pending.pop(tag, None)
        self._retry_at[tag] = time.monotonic() + _RETRY
        self._lost_once = True
        with self._lock:
            for event in self._confirmed.values():
                event.clear()

    def _settle(self) -> None:
        """Set the confirmation of every name confirmed in every shard; after a loss, once
        all are back, re-check the running job (events may have been missed)."""
        waiting = set().union(*self._pending.values()) if self._pending else set()
        down = any(not sub.connected for sub in self._subs.values())
        with self._lock:
            for worker, event in self._confirmed.items():
                if not down and not any(c.endswith(":w:" + worker) for c in waiting):
                    event.set()
            wanted = bool(self._wanted)
        if self._lost_once and wanted and not down and not waiting:
            self._lost_once = False
            if self.on_reconnect is not None:
                try:
                    self.on_reconnect()
                except Exception:
                    log.exception("re-check after reconnect failed")

    def _handle(self, tag: str | None, sub: Subscription, msg: dict[str, Any]) -> None:
        kind = msg.get("type")
        channel = str(msg.get("channel", ""))
        prefix = sub.keyspace.channel("w:")
        worker = channel[len(prefix):] if channel.startswith(prefix) else channel
        if Subscription.confirms(msg):
            self._pending.get(tag, set()).discard(channel)
            self._settle()
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
