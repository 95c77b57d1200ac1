"""Keep the running job's lock alive from a background thread, and enforce a time limit.

One long-lived thread per job-running process. `watch(job)` starts beating for a job,
`unwatch()` stops. The lock is renewed at about a third of its lifetime, so two beats can be
lost before the lease ends. A heartbeat refused by the engine means the lock is gone (the job
was handed to another worker, canceled or moved): `on_lost` is called and the job must stop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.exceptions import (
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessError,
)

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["Heartbeater"]

log = logging.getLogger("django_qless.worker")

_MIN_PERIOD = 0.2


class Heartbeater(threading.Thread):
    """Background heartbeat (and optional time limit) for the job being run."""

    def __init__(
        self,
        on_lost: Callable[[Job, str], None],
        *,
        timeout: float = 0.0,
        on_timeout: Callable[[Job], None] | None = None,
        on_tick: Callable[[Job, float], None] | None = None,
    ) -> None:
        super().__init__(name="qless-heartbeat", daemon=True)
        self.on_lost = on_lost
        self.timeout = timeout
        self.on_timeout = on_timeout
        # Called about once a second with the job's elapsed time (process titles).
        self.on_tick = on_tick
        self._cond = threading.Condition()
        self._job: Job | None = None
        self._generation = 0
        self._stopped = False
        self.beats = 0

    def watch(self, job: Job) -> None:
        """Start heartbeating `job` (replaces any previous job)."""
        with self._cond:
            self._job = job
            self._generation += 1
            self._cond.notify_all()

    def unwatch(self) -> None:
        """Stop heartbeating the current job."""
        with self._cond:
            self._job = None
            self._generation += 1
            self._cond.notify_all()

    def stop(self) -> None:
        """End the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()

    @staticmethod
    def period_for(job: Job) -> float:
        """Return how often to renew `job`'s lock: a third of its remaining lifetime."""
        try:
            lifetime = float(job.expires_at) - float(job.client.now())
        except Exception:
            lifetime = 60.0
        return max(_MIN_PERIOD, lifetime / 3.0)

    def run(self) -> None:
        while True:
            with self._cond:
                while self._job is None and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                job = self._job
                generation = self._generation
            assert job is not None
            started = time.monotonic()
            period = self.period_for(job)
            next_beat = started + period
            deadline = started + self.timeout if self.timeout > 0 else None
            next_tick = started + 1.0
            while True:
                now = time.monotonic()
                wake_at = next_beat if deadline is None else min(next_beat, deadline)
                if self.on_tick is not None:
                    wake_at = min(wake_at, next_tick)
                with self._cond:
                    if self._stopped or self._generation != generation:
                        break
                    if wake_at > now:
                        self._cond.wait(wake_at - now)
                        if self._stopped or self._generation != generation:
                            break
                now = time.monotonic()
                if self.on_tick is not None and now >= next_tick:
                    next_tick = now + 1.0
                    try:
                        self.on_tick(job, now - started)
                    except Exception:  # noqa: S110 - a title is cosmetic
                        pass
                if deadline is not None and now >= deadline:
                    self._fire_timeout(job, generation)
                    deadline = None
                    continue
                if now >= next_beat:
                    next_beat = self._beat(job, generation, period)

    def _beat(self, job: Job, generation: int, period: float) -> float:
        """Renew the lock once; return when to beat next."""
        try:
            job.heartbeat()
            self.beats += 1
            return time.monotonic() + self.period_for(job)
        except (LostLockError, InvalidStateTransition, JobNotFound) as exc:
            with self._cond:
                current = self._generation == generation
            if current:
                log.warning("job %s: heartbeat refused, lock lost: %s", job.jid, exc)
                self.on_lost(job, str(exc))
            return time.monotonic() + 3600.0
        except QlessError as exc:
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        except Exception as exc:  # connection errors and the like: transient
            log.warning("job %s: heartbeat failed (%s); retrying", job.jid, exc)
        return time.monotonic() + max(_MIN_PERIOD, min(period, 1.0))

    def _fire_timeout(self, job: Job, generation: int) -> None:
        with self._cond:
            current = self._generation == generation
        if current and self.on_timeout is not None:
            log.warning("job %s: time limit of %.1fs reached", job.jid, self.timeout)
            self.on_timeout(job)
