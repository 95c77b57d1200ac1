"""The heartbeat thread: renew the running job's lease, and time its limits."""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Protocol

from django_qless.core.engine.pubsub import block_async_signals
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.registry import NO_LIMITS, TimeLimits
from django_qless.core.workers.runner import LOST, log_job

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["LONG_AFTER", "Heartbeater", "Watcher"]

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
