"""Keep the running job's lock alive from a background thread, and enforce its time limits.

One long-lived thread per job-running process. `watch(job)` starts beating for a job,
`unwatch()` stops. The lock is renewed at about a third of its lifetime, so two beats can be
lost before the lease ends. A heartbeat refused by the engine means the lock is gone (the job
was handed to another worker, canceled or moved): `on_lost` is called and the job must stop.

`watch`/`unwatch` are on the per-job hot path, so they only swap one attribute: waking the
thread for every job (a condition notify, then the thread fighting the job for the GIL) cost
more than a no-op job itself. While jobs flow the thread looks every `check` seconds (a job
is noticed at most that late; the first beat is due a third of a lease after `watch`, at
least 0.2 s); after `park_after` seconds without a job it sleeps until the next `watch`.
`on_due(job, what)` is called once for each of the job's times: "long" after `long_after`
seconds (the jobs held ahead go back), "soft" at its soft limit, "timeout" at its hard one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.exceptions import (
    InvalidArgument,
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessError,
)
from django_qless.core.registry import NO_LIMITS, TimeLimits
from django_qless.core.signalmask import block_async_signals
from django_qless.core.workers.runner import log_job

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["Heartbeater"]

log = logging.getLogger("django_qless.worker")

_MIN_PERIOD = 0.2
_TICK = 1.0

# (generation, job or None, monotonic time of watch/unwatch, the job's limits): replaced as
# a whole, so the thread always reads a consistent tuple without taking a lock.
_Current = tuple[int, "Job | None", float, TimeLimits]


class Heartbeater(threading.Thread):
    """Background heartbeat (and time limits) for the job being run."""

    def __init__(
        self,
        on_lost: Callable[[Job, str], None],
        *,
        on_due: Callable[[Job, str], None] | None = None,
        long_after: float | None = None,
        on_tick: Callable[[Job, float], None] | None = None,
        check: float = 0.05,
        park_after: float = 1.0,
    ) -> None:
        super().__init__(name="qless-heartbeat", daemon=True)
        self.on_lost = on_lost
        self.on_due = on_due
        self.long_after = long_after
        # Called when the thread first notices a job, then about once a second, with the
        # job's elapsed time (process titles).
        self.on_tick = on_tick
        self.check = check
        self.park_after = park_after
        self._cond = threading.Condition()
        self._current: _Current = (0, None, time.monotonic(), NO_LIMITS)
        self._stopped = False
        self._parked = False
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

    def is_current(self, generation: int) -> bool:
        """Tell whether `generation` is still the watched job's."""
        return self._current[0] == generation

    @staticmethod
    def period_for(job: Job) -> float:
        """Return how often to renew `job`'s lock: a third of its remaining lifetime."""
        try:
            lifetime = float(job.expires_at) - float(job.client.now())
        except Exception:
            lifetime = 60.0
        return max(_MIN_PERIOD, lifetime / 3.0)

    def _sleep(self, seconds: float) -> None:
        with self._cond:
            if not self._stopped and seconds > 0:
                self._cond.wait(seconds)

    def _park(self) -> None:
        """Sleep until `watch` (or `stop`): no wake-ups at all while the process is idle."""
        with self._cond:
            # `watch` sets the job, then reads _parked; we set _parked, then read the job:
            # one of the two sees the other's write, so no watch is slept through.
            self._parked = True
            try:
                while self._current[1] is None and not self._stopped:
                    self._cond.wait()
            finally:
                self._parked = False

    def run(self) -> None:
        block_async_signals()
        seen = -1
        period = next_beat = next_tick = 0.0
        due: list[tuple[float, str]] = []  # (when, what) still to come for the job
        while not self._stopped:
            generation, job, since, limits = self._current
            now = time.monotonic()
            if job is None:
                if now - since >= self.park_after:
                    self._park()
                else:
                    self._sleep(min(self.check, since + self.park_after - now))
                continue
            if generation != seen:
                seen = generation
                period = self.period_for(job)
                next_beat = since + period
                due = self._due(since, limits)
                next_tick = now  # the first tick (title) as soon as the job is noticed
            if self.on_tick is not None and now >= next_tick:
                next_tick = now + _TICK
                try:
                    self.on_tick(job, now - since)
                except Exception:  # noqa: S110 - a title is cosmetic
                    pass
            while due and now >= due[0][0]:
                self._fire(job, generation, due.pop(0)[1])
            if now >= next_beat and self.is_current(generation):
                next_beat = self._beat(job, generation, period)
            wake_at = min(now + self.check, next_beat, next_tick, *(at for at, _ in due[:1]))
            self._sleep(wake_at - time.monotonic())

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
            return time.monotonic() + self.period_for(job)
        except (LostLockError, InvalidStateTransition, JobNotFound) as exc:
            if self.is_current(generation):
                log_job(logging.WARNING, job, "job %s: lease lost (heartbeat refused), "
                        "stopping it: %s", job.jid, exc)
                self.on_lost(job, str(exc))
            return time.monotonic() + 3600.0
        except QlessError as exc:
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        except Exception as exc:  # connection errors and the like: transient
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        return time.monotonic() + max(_MIN_PERIOD, min(period, 1.0))

    def _due(self, since: float, limits: TimeLimits) -> list[tuple[float, str]]:
        """Return what falls due while the job runs, soonest first."""
        due = [(since + self.long_after, "long")] if self.long_after is not None else []
        due += [(since + at, what) for at, what in ((limits.soft, "soft"),
                                                    (limits.hard, "timeout")) if at]
        return sorted(due)

    def _fire(self, job: Job, generation: int, what: str) -> None:
        if self.is_current(generation) and self.on_due is not None:
            try:
                self.on_due(job, what)
            except Exception:
                log.exception("job %s: acting on its %r time failed", job.jid, what)
