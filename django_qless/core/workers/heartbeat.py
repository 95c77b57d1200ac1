"""The heartbeats: the thread renewing the running job's lease and timing its limits, and
the worker's own `Beat`, which tells the engine (and the console) that it is alive."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from django_qless.core.engine.pubsub import block_async_signals
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.registry import NO_LIMITS, TimeLimits
from django_qless.core.workers.runner import LOST, log_job

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.workers.shutdown import SignalState

__all__ = ["LONG_AFTER", "Beat", "Heartbeater", "Watcher"]

log = logging.getLogger("django_qless.worker")

LONG_AFTER = 0.1  # a job running this long is "long" (the loop hands the held jobs back)


class Watcher(Protocol):
    """The job loop, told of a refused heartbeat, and of the job running `elapsed` s: "tick"
    on noticing it and every second after, "long", "soft" and "timeout" (its limits) once."""

    def on_lock_lost(self, job: Job, why: str) -> None: ...

    def noticed(self, job: Job, what: str, elapsed: float) -> None: ...


class Heartbeater(threading.Thread):
    """Renew the watched job's lease at a third of its lifetime, and time its limits.

    `watch`/`unwatch` only swap one tuple (waking the thread per job cost more than a no-op
    job): the thread looks every `check` s, and parks after `park_after` s without a job.
    """

    def __init__(self, watcher: Watcher, *, check: float = 0.05,
                 park_after: float = 1.0) -> None:
        super().__init__(name="qless-heartbeat", daemon=True)
        self.watcher, self.check, self.park_after = watcher, check, park_after
        self._cond = threading.Condition()
        # (generation, job or None, when watched/unwatched, its limits): replaced whole, so
        # the thread reads a consistent tuple without a lock.
        self._current: tuple[int, Job | None, float, TimeLimits] = (
            0, None, time.monotonic(), NO_LIMITS)
        self._stopped = self._parked = False
        self.beats = 0

    def watch(self, job: Job, limits: TimeLimits = NO_LIMITS) -> None:
        """Start heartbeating and timing `job` (replaces any previous job)."""
        self._current = (self._current[0] + 1, job, time.monotonic(), limits)
        if self._parked:
            with self._cond:
                self._cond.notify_all()

    def unwatch(self) -> None:
        """Stop heartbeating the current job."""
        self._current = (self._current[0] + 1, None, time.monotonic(), NO_LIMITS)

    def stop(self) -> None:
        """End the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    def _wait(self, seconds: float | None) -> None:
        """Sleep `seconds`, or (None) park until `watch` or `stop`."""
        with self._cond:
            if seconds is not None:
                if not self._stopped and seconds > 0:
                    self._cond.wait(seconds)
                return
            # `watch` sets the job, then reads _parked; we set _parked, then read the job:
            # one of the two sees the other's write, so no watch is slept through.
            self._parked = True
            while self._current[1] is None and not self._stopped:
                self._cond.wait()
            self._parked = False

    def run(self) -> None:
        """Beat, and tell the watcher what is due, for the watched job until stopped."""
        block_async_signals()
        seen = -1
        period = next_beat = next_tick = 0.0
        due: list[tuple[float, str]] = []  # (when, what) still to come for the job
        while not self._stopped:
            generation, job, since, limits = self._current
            now = time.monotonic()
            if job is None:
                idle_for = now - since
                self._wait(None if idle_for >= self.park_after
                           else min(self.check, self.park_after - idle_for))
                continue
            if generation != seen:
                seen, period, next_tick = generation, _period(job), now
                next_beat = since + period
                due = sorted((since + at, what) for at, what in (
                    (LONG_AFTER, "long"), (limits.soft, "soft"), (limits.hard, "timeout")) if at)
            if now >= next_tick:
                next_tick = now + 1.0
                self._tell(job, generation, "tick", now - since)
            while due and now >= due[0][0]:
                self._tell(job, generation, due.pop(0)[1], now - since)
            if now >= next_beat and self._current[0] == generation:
                next_beat = self._beat(job, generation, period)
            self._wait(min(now + self.check, next_beat, next_tick, *(at for at, _ in due[:1]))
                       - time.monotonic())

    def _tell(self, job: Job, generation: int, what: str, elapsed: float) -> None:
        if self._current[0] == generation:
            try:
                self.watcher.noticed(job, what, elapsed)
            except Exception:
                log.exception("job %s: acting on its %r time failed", job.jid, what)

    def _beat(self, job: Job, generation: int, period: float) -> float:
        """Renew the lock once; return when to beat next."""
        try:
            try:
                job.heartbeat()
            except InvalidArgument as exc:
                # Data changes that cannot be stored (not JSON, too large) must not cost the
                # job its lease: renew without them (the completion reports them).
                log.warning("job %s: heartbeat without the data changes: %s", job.jid, exc)
                job._heartbeat(send_data=False)
            self.beats += 1
            return time.monotonic() + _period(job)
        except LOST as exc:
            if self._current[0] == generation:
                log_job(logging.WARNING, job, "job %s: lease lost (heartbeat refused), "
                        "stopping it: %s", job.jid, exc)
                self.watcher.on_lock_lost(job, str(exc))
            return time.monotonic() + 3600.0
        except Exception as exc:  # connection errors and the like: transient
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        return time.monotonic() + max(0.2, min(period, 1.0))


def _period(job: Job) -> float:
    """Return how often to renew `job`'s lock: a third of its remaining lifetime."""
    try:
        lifetime = float(job.expires_at) - float(job.client.now())
    except Exception:
        lifetime = 60.0
    return max(0.2, lifetime / 3.0)


@dataclass
class Beat:
    """What the reaper's calls say for a worker's group of names, every `seconds` at most."""

    group: str
    seconds: float
    signals: SignalState  # its state: "draining" once asked to finish its jobs, else "live"
    request_stop: Callable[[bool], None]  # how an operator's request is obeyed
    members: Callable[[], Sequence[str]] = tuple  # the other names it beats for (children)
    started: bool = False  # the first beat (state "start") went through
    sent: tuple[str, ...] | None = None  # the members the engine holds (None: send them)
    at: float = field(default_factory=time.monotonic)  # when the last beat went through

    def send(self, clients: Sequence[Any], reap: bool, now: float) -> list[str]:
        """Beat (with the reap) on every shard, then act on an operator's request."""
        members = tuple(self.members())
        # (unchanged members are not sent again: the engine keeps them)
        send = None if members == self.sent and self.started else members
        state = ("draining" if self.signals.graceful else "live") if self.started else "start"
        jids: list[str] = []
        requests = set()
        lost = False
        for client in clients:
            reply = client.workers.beat(self.group, state, members=send, reap=reap)
            jids += reply.reaped
            requests.add(reply.request)
            lost = lost or reply.members_lost
        self.sent = None if lost else members  # (lost: sent again with the next beat)
        self.started = True
        self.at = now
        for request in sorted(requests - {""}, key=("stop", "quiet").index):
            self.obey(request)  # (a stop wins over a quiet)
        return jids

    def obey(self, action: str) -> None:
        """Act once on an operator's quiet (as QUIT) or stop (as TERM) request."""
        signals = self.signals
        if signals.stop_requests or (action == "quiet" and signals.graceful):
            return
        quiet = action == "quiet"
        log.warning("%s: asked from the console to %s", self.group,
                    "be quiet: finishing running jobs" if quiet else
                    "stop: releasing running jobs")
        self.request_stop(quiet)
