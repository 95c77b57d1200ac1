"""The heartbeat thread: renew the running job's lease, and time its limits."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.engine.pubsub import block_async_signals
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.registry import NO_LIMITS, TimeLimits
from django_qless.core.workers.runner import LOST, log_job

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["Heartbeater"]

log = logging.getLogger("django_qless.worker")


class Heartbeater(threading.Thread):
    """Renew the watched job's lease at a third of its lifetime, and time its limits.

    `watch`/`unwatch` only swap one tuple (waking the thread per job cost more than a no-op
    job): while jobs flow the thread looks every `check` seconds, and after `park_after`
    seconds without a job it sleeps until the next `watch`. A refused beat calls `on_lost`;
    `on_due(job, what)` fires once for each of "long" (`long_after`), "soft" and "timeout";
    `on_tick(job, elapsed)` on noticing the job, then every second (process titles).
    """

    def __init__(self, on_lost: Callable[[Job, str], None], *,
                 on_due: Callable[[Job, str], None] | None = None,
                 long_after: float | None = None,
                 on_tick: Callable[[Job, float], None] | None = None,
                 check: float = 0.05, park_after: float = 1.0) -> None:
        super().__init__(name="qless-heartbeat", daemon=True)
        self.on_lost, self.on_due, self.on_tick = on_lost, on_due, on_tick
        self.long_after, self.check, self.park_after = long_after, check, park_after
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
        """Beat, fire and tick for the watched job until stopped."""
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
                    (self.long_after, "long"), (limits.soft, "soft"), (limits.hard, "timeout"))
                    if at is not None and (at or what == "long"))
            if self.on_tick is not None and now >= next_tick:
                next_tick = now + 1.0
                try:
                    self.on_tick(job, now - since)
                except Exception:  # noqa: S110 - a title is cosmetic
                    pass
            while due and now >= due[0][0]:
                self._fire(job, generation, due.pop(0)[1])
            if now >= next_beat and self._current[0] == generation:
                next_beat = self._beat(job, generation, period)
            self._wait(min(now + self.check, next_beat, next_tick, *(at for at, _ in due[:1]))
                       - time.monotonic())

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
                self.on_lost(job, str(exc))
            return time.monotonic() + 3600.0
        except Exception as exc:  # connection errors and the like: transient
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        return time.monotonic() + max(0.2, min(period, 1.0))

    def _fire(self, job: Job, generation: int, what: str) -> None:
        if self._current[0] == generation and self.on_due is not None:
            try:
                self.on_due(job, what)
            except Exception:
                log.exception("job %s: acting on its %r time failed", job.jid, what)


def _period(job: Job) -> float:
    """Return how often to renew `job`'s lock: a third of its remaining lifetime."""
    try:
        lifetime = float(job.expires_at) - float(job.client.now())
    except Exception:
        lifetime = 60.0
    return max(0.2, lifetime / 3.0)
