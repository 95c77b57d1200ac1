"""The reserve → run → complete loop shared by the serial worker and each forked child.

Hot path: one round trip per job. `complete.reserve` completes the finished job and takes
the next one in the same script call. When nothing is ready the loop blocks on the wake-up
channels (subscribed *before* reserving) for at most min(interval, wake), where `wake` is
the engine's "seconds until something is due" (scheduled job, recurring spawn, lock expiry).
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING

import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import (
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessConnectionError,
    QlessError,
)
from django_qless.core.serialization import check_jid, check_worker
from django_qless.core.workers.config import WorkerConfig
from django_qless.core.workers.heartbeat import Heartbeater
from django_qless.core.workers.hooks import WorkerHooksProtocol
from django_qless.core.workers.proctitle import child_title, set_title
from django_qless.core.workers.reaper import LeaseReaper
from django_qless.core.workers.reservers import QueueSelection, make_reserver
from django_qless.core.workers.runner import AbortGuard, JobRunner, Outcome
from django_qless.core.workers.sandbox import Sandbox
from django_qless.core.workers.shutdown import SignalState
from django_qless.core.workers.wakeup import WakeWaiter

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["JobLoop", "release_job"]

log = logging.getLogger("django_qless.worker")

_MAX_QUEUES_PER_CALL = 20
# While jobs flow, buffered wake-ups are consumed at most this often (the wake socket must
# not fill up); the reserve that follows an empty complete+reserve drains anyway.
_DRAIN_EVERY = 0.05
_TRANSIENT = (QlessConnectionError, redis.ConnectionError, redis.TimeoutError, OSError)


def release_job(client: Client, jid: str, worker: str) -> bool:
    """Put a job held by `worker` back to waiting, keeping everything, spending no retry.

    One engine call (`release`), so it cannot race a lock expiry. Returns False if the job
    is no longer running for that worker.
    """
    try:
        client.call("release", check_jid(jid), check_worker(worker))
    except (LostLockError, InvalidStateTransition, JobNotFound):
        return False
    log.info("job %s released back to waiting", jid)
    return True


class JobLoop:
    """Take jobs and run them in this process until told to stop."""

    #: Wait at most this long while idle before re-checking the supervisor (children).
    idle_cap = 60.0

    def __init__(
        self,
        config: WorkerConfig,
        hooks: WorkerHooksProtocol,
        name: str,
        signals: SignalState,
        *,
        resume: bool = False,
        max_jobs: int = 0,
    ) -> None:
        self.config = config
        self.hooks = hooks
        self.name = name
        self.signals = signals
        self.resume = resume
        self.max_jobs = max_jobs
        self.client = config.make_client(worker_name=name)
        self.selection = QueueSelection(
            config.queues, self.client.queues.names, refresh=config.queue_refresh
        )
        self.reserver = make_reserver(config.reserver, self.selection)
        self.guard = AbortGuard()
        self.sandbox = Sandbox(config.sandbox_root, name)
        self.runner = JobRunner(config, hooks, config.registry, self.sandbox, self.guard)
        self.waiter = WakeWaiter(self.client.redis, self.selection, signals.wake_pipe)
        self.heartbeater = Heartbeater(
            self._on_lock_lost,
            timeout=self._thread_timeout(),
            on_timeout=self._on_timeout,
            on_tick=self._tick,
        )
        self.started = time.monotonic()
        self.done = 0
        self.failed = 0
        self.current: Job | None = None
        self._pending: deque[Job] = deque()
        self._backoff = 0.0
        self._drain_at = 0.0
        self._woken = False
        # Only where no supervisor does it (the serial worker); see reaper.py.
        self.reaper: LeaseReaper | None = None
        # The heartbeat thread sets the running title, the loop the idle one: this keeps a
        # late "running" from overwriting "idle".
        self._title_lock = threading.Lock()

    # -- WorkerInfo -------------------------------------------------------------------------
    @property
    def queues(self) -> Sequence[str]:
        """Return the queue specs this loop serves."""
        return self.config.queues

    # -- overridables -----------------------------------------------------------------------
    def _thread_timeout(self) -> float:
        """Return the per-job time limit the heartbeat thread enforces (0: none)."""
        return 0.0

    def _on_lock_lost(self, job: Job, why: str) -> None:
        """Called from the heartbeat thread when the engine refused a heartbeat."""
        if self.current is job:
            self.guard.abort("lock_lost")

    def _on_timeout(self, job: Job) -> None:
        """Called from the heartbeat thread when the job ran past its time limit."""
        self.guard.abort("timeout")

    def on_job_start(self, job: Job) -> None:
        """Called right before a job runs."""

    def on_job_end(self, job: Job, outcome: Outcome) -> None:
        """Called after a job was settled."""

    def between_jobs(self) -> None:
        """Called before the loop reserves on its own, pauses or leaves (no job running)."""

    def on_aborted(self, job: Job, reason: str) -> bool:
        """Dispose of an aborted job; return True to stop the loop."""
        return False

    def should_continue(self) -> bool:
        """Return False to leave the loop (e.g. the supervisor died)."""
        return True

    def _pre_abort(self) -> str | None:
        """Return why a job must not start although it was handed over (a stop request)."""
        return "shutdown" if self.signals.stop_requests else None

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Serve jobs until stopped; always deregisters and releases unstarted jobs."""
        self.hooks.on_worker_start(self)
        self.heartbeater.start()
        try:
            if self.resume:
                self._pending.extend(self._held_jobs())
            self._loop()
        finally:
            self._finish()

    def _limit_reached(self) -> bool:
        if self.max_jobs and self.done + self.failed >= self.max_jobs:
            return True
        duration = self.config.max_duration
        return bool(duration and time.monotonic() - self.started >= duration)

    def _taking(self) -> bool:
        """Tell whether the loop may take another job now."""
        return not (self.signals.stopping or self.signals.paused or self._limit_reached())

    def _loop(self) -> None:
        while True:
            if self.signals.stopping or self._limit_reached() or not self.should_continue():
                return
            if self.reaper is not None:
                self.reaper.maybe_reap()
            if self.signals.paused:
                self.between_jobs()
                self._idle_title()
                self.waiter.wait(min(self.config.interval, self.idle_cap))
                self.waiter.drain()  # wake-ups while paused must not make wait() spin
                continue
            if not self._pending:
                self.between_jobs()
                jobs, wake = self._reserve()
                if not jobs:
                    self._idle(wake)
                    continue
                self._pending.extend(jobs)
            # A stop that landed during the reserve: do not start the job (released later).
            if self.signals.stop_requests or not self.should_continue():
                return
            job = self._pending.popleft()
            if self._perform(job):
                return

    def _perform(self, job: Job) -> bool:
        """Run one job and settle it; return True to stop the loop."""
        # No title here: the heartbeat thread sets "running" once it notices the job (within
        # its check interval), so a stream of short jobs costs no setproctitle per job.
        self.current = job
        self.on_job_start(job)
        self.heartbeater.watch(job)
        try:
            outcome = self.runner.run(job, self._pre_abort)
        finally:
            self.heartbeater.unwatch()
        stop = False
        if outcome is Outcome.ABORTED:
            reason = self.guard.reason or "aborted"
            log.warning("job %s aborted: %s", job.jid, reason)
            stop = self.on_aborted(job, reason)
        elif outcome is Outcome.COMPLETE:
            outcome = self._complete(job)
        if outcome is Outcome.FAILED:
            self.failed += 1
        elif outcome in (Outcome.COMPLETE, Outcome.SETTLED):
            self.done += 1
        self.current = None
        self.on_job_end(job, outcome)
        return stop

    def _complete(self, job: Job) -> Outcome:
        """Complete `job` and, if we may, take the next one in the same round trip."""
        want = 1 if not self._pending and self._will_take_after(job) else 0
        queues = self.reserver.order()[:_MAX_QUEUES_PER_CALL] or [job.queue_name]
        if want:
            self.waiter.ensure_subscribed()
            now = time.monotonic()
            if now >= self._drain_at:
                self._drain_at = now + _DRAIN_EVERY
                self.waiter.drain()
        try:
            _, jobs, _ = self.client.complete_and_reserve(job, queues, want)
        except (LostLockError, InvalidStateTransition, JobNotFound) as exc:
            log.warning("job %s: complete refused, lock lost: %s", job.jid, exc)
            return Outcome.LOST
        except QlessError as exc:
            log.error("job %s: complete failed: %s", job.jid, exc)
            return Outcome.LOST
        self._pending.extend(jobs)
        return Outcome.COMPLETE

    def _will_take_after(self, job: Job) -> bool:
        """Tell whether the loop will want another job once `job` counts as done."""
        if self.signals.stopping or self.signals.paused or not self.should_continue():
            return False
        if self.max_jobs and self.done + self.failed + 1 >= self.max_jobs:
            return False
        duration = self.config.max_duration
        return not (duration and time.monotonic() - self.started >= duration)

    def _reserve(self) -> tuple[list[Job], float | None]:
        """Take one job from the selected queues (subscribing to wake-ups first).

        Wake-ups buffered before a reserve are consumed first, so one arriving while we
        wait means new work. Right after a wake-up, though, the reserve goes first (the
        drain costs about as much as the reserve on a process that just woke): if it
        yields a job, the buffered wake-ups are consumed before the next complete+reserve;
        if not, they are consumed now and the reserve repeated, as usual.
        """
        self.waiter.ensure_subscribed()
        woken, self._woken = self._woken, False
        if woken:
            jobs, wake = self._reserve_once()
            if jobs:
                self._drain_at = 0.0
                return jobs, wake
        self.waiter.drain()
        return self._reserve_once()

    def _reserve_once(self) -> tuple[list[Job], float | None]:
        try:
            order = self.reserver.order()
            wake: float | None = None
            for start in range(0, len(order), _MAX_QUEUES_PER_CALL):
                chunk = order[start:start + _MAX_QUEUES_PER_CALL]
                jobs, chunk_wake = self.client.reserve(chunk, 1)
                if jobs:
                    self._backoff = 0.0
                    return jobs, None
                if chunk_wake is not None:
                    wake = chunk_wake if wake is None else min(wake, chunk_wake)
            self._backoff = 0.0
            return [], wake
        except _TRANSIENT as exc:
            self._backoff = min(max(self._backoff * 2, 0.1), 10.0)
            log.warning("reserve failed (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff * (0.5 + random.random())  # noqa: S311
        except QlessError as exc:
            self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
            log.error("reserve refused (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff

    def _idle(self, wake: float | None) -> None:
        """Block until a wake-up, a signal, or the next due time."""
        self._idle_title()
        timeout = min(self.config.interval, self.idle_cap)
        if wake is not None:
            # A lock expiring "now" can report 0 repeatedly during its grace: do not spin.
            timeout = min(timeout, max(wake, 0.005))
        if self.reaper is not None:
            timeout = min(timeout, max(self.reaper.seconds_left(), 0.005))
        self._woken = self.waiter.wait(timeout)

    def _held_jobs(self) -> list[Job]:
        """Return the jobs this worker name still holds (for `resume`)."""
        try:
            jids = self.client.workers[self.name]["jobs"]
            jobs = self.client.jobs.get_many(*jids) if jids else []
        except QlessError as exc:
            log.error("resume: could not list held jobs: %s", exc)
            return []
        held = [j for j in jobs if j.state == "running" and j.worker_name == self.name]
        if held:
            log.info("resuming %d held job(s): %s", len(held), ", ".join(j.jid for j in held))
        return held

    def _finish(self) -> None:
        """Release unstarted jobs, stop threads, deregister, run stop hooks."""
        for job in list(self._pending):
            try:
                release_job(self.client, job.jid, self.name)
            except QlessError as exc:
                log.error("job %s: could not release (%s); its lease will expire", job.jid, exc)
        self._pending.clear()
        self.heartbeater.stop()
        self.waiter.close()
        try:
            self.client.workers.deregister(self.name)
        except QlessError as exc:
            log.warning("could not deregister %s: %s", self.name, exc)
        self.hooks.on_worker_stop(self)

    # -- titles ----------------------------------------------------------------------------
    def _tick(self, job: Job, elapsed: float) -> None:
        """Show the running job (heartbeat thread: on noticing the job, then every second)."""
        with self._title_lock:
            if self.current is job:
                set_title(child_title(self.name, self.config.queues, jid=job.jid,
                                      klass=job.klass_name, queue=job.queue_name,
                                      elapsed=elapsed))

    def _idle_title(self) -> None:
        with self._title_lock:
            set_title(child_title(self.name, self.config.queues, paused=self.signals.paused))

    def pid(self) -> int:
        """Return this process's id."""
        return os.getpid()
