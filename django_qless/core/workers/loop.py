"""`JobLoop`: take a job, run it, report it; the loop of the serial worker and of each child."""

from __future__ import annotations

import logging
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.exceptions import QlessError, SoftTimeLimitExceeded
from django_qless.core.registry import NO_LIMITS
from django_qless.core.upkeep import LeaseReaper
from django_qless.core.worker_options import WorkerConfig
from django_qless.core.workers.hand import JobHand, Settled, SharedJobPool
from django_qless.core.workers.heartbeat import Heartbeater
from django_qless.core.workers.runner import (
    JobRunner,
    Outcome,
    Sandbox,
    WorkerHooks,
    log_job,
)
from django_qless.core.workers.shards import (
    QueueRoutes,
    QueueSelection,
    Reserver,
    known_queues,
)
from django_qless.core.workers.shutdown import AbortGuard, SignalState
from django_qless.core.workers.wakeup import WakeWaiter

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.workers.leadership import Leadership, TokenFile

__all__ = ["JobLoop"]

log = logging.getLogger("django_qless.worker")

IDLE_CAP = 3599.0  # the longest idle wait (the engine keeps a registration <= 3600 s)
_DONE = {Outcome.COMPLETED: "done", Outcome.SETTLED: "settled by the job itself"}


class JobLoop:
    """Take jobs and run them in this process until told to stop."""

    hard_limit_in_thread = False  # stop a job at its hard limit here (a child: its supervisor)

    def __init__(self, config: WorkerConfig, hooks: WorkerHooks, name: str,
                 signals: SignalState, *, resume: bool = False, max_jobs: int = 0,
                 pool: SharedJobPool | None = None, reaper: LeaseReaper | None = None,
                 leader_token: TokenFile | None = None) -> None:
        self.config = config
        self.queues = config.queues  # (WorkerInfo)
        if "django_qless.core.integrations" in sys.modules:  # (else none are installed)
            hooks = sys.modules["django_qless.core.integrations"].with_installed_hooks(hooks)
        self.hooks = hooks
        self.name = name
        self.group = name  # whose beats show this loop alive (a child: its supervisor's name)
        self.signals = signals
        self.resume = resume
        self.client = config.make_client(worker_name=name)
        selection = QueueSelection(config.queues, known_queues(self.client),
                                   refresh=config.queue_refresh)
        self.routes = QueueRoutes(self.client, selection, refresh=config.queue_refresh)
        self.guard = AbortGuard()
        self.runner = JobRunner(config, hooks, config.registry,
                                Sandbox(config.sandbox_root, name), self.guard)
        self.waiter = WakeWaiter(self.routes, signals.wake_pipe, name)
        self.recheck = min(config.interval, IDLE_CAP)  # an idle wait's longest (--interval)
        self.hand = JobHand(name, self.waiter, Reserver(config.reserver, selection),
                            cap=max_jobs, pool=pool, prefetch=config.prefetch,
                            register_for=self.recheck)
        self.heartbeater = Heartbeater(self)
        self.reaper = reaper  # only where no supervisor reaps (the serial worker)
        self.leadership: Leadership | None = None  # (the serial worker's: always registers)
        if leader_token is not None:
            from django_qless.core.workers.leadership import open_leadership

            self.leadership = open_leadership(leader_token, self.waiter, config.leader_hold,
                                              config.idle_disconnect)
        self.started = time.monotonic()
        self.done = self.failed = 0
        self.current: Job | None = None
        self.limits = NO_LIMITS  # the running job's (JobRunner.limits_of)
        self._done_level = logging.INFO if config.verbosity >= 1 else logging.DEBUG
        # The job and heartbeat threads both report (a long job hands the held jobs back);
        # the heartbeat thread sets the running title, the loop the idle one.
        self._count_lock = threading.Lock()
        self._title_lock = threading.Lock()
        self._told_draining = False
        self.check_every = 1.0  # seconds between supervisor checks waiting for the token
        self.idling = False  # the last reserve found nothing (no job started since)

    def arm_signals(self, on_signal: Callable[[int], None]) -> None:
        """Install the handlers (main thread); aborts from other threads come as URG."""
        self.signals.callback = on_signal
        self.signals.on_kick = self.guard.deliver
        self.signals.install()
        self.guard.kick_by_signal()

    def disarm_signals(self) -> None:
        """Restore the handlers `arm_signals` replaced."""
        self.guard.kick = None
        self.signals.on_kick = None
        self.signals.uninstall()

    # -- what a subclass extends ------------------------------------------------------------
    def on_job_start(self, job: Job) -> None:
        """Called right before a job runs."""

    def report(self, job: Job, outcome: Outcome) -> None:
        """Count a settled job and log it (job or heartbeat thread)."""
        with self._count_lock:
            if outcome is Outcome.FAILED:
                self.failed += 1
            elif outcome in _DONE:
                self.done += 1
        if outcome is Outcome.COMPLETED:
            job.open_gates()  # flow members of other shards waiting on it
        elapsed = self.hand.ran_for.pop(job.jid, None)
        # A job that settled itself (retried, moved, ...) was logged by whoever did it.
        level = self._done_level if outcome is Outcome.COMPLETED else logging.DEBUG
        if elapsed is not None and outcome in _DONE and log.isEnabledFor(level):
            log.log(level, "job %s %s %s in %.0f ms", job.jid, job.klass_name, _DONE[outcome],
                    elapsed * 1000)

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

    def on_lock_lost(self, job: Job, why: str) -> None:
        """Heartbeat thread: the engine refused a heartbeat."""
        if self.current is job:
            self.guard.abort("lock_lost")

    # -- the loop ---------------------------------------------------------------------------
    def run(self) -> None:
        """Serve jobs until stopped; always deregisters and releases unstarted jobs."""
        self.hooks.on_worker_start(self)
        self._hello()
        self.heartbeater.start()
        try:
            if self.resume:
                self.hand.add(self.hand.reclaim())
            while not (self.signals.stopping or self._limit_reached()
                       or not self.should_continue()):
                job = self._take()
                if job is None:
                    continue
                if self.signals.stop_requests or not self.should_continue():
                    self.hand.put_back(job)  # a stop during the reserve: released unstarted
                    return
                outcome, elapsed = self._run(job)
                if self._settle(job, outcome, elapsed):
                    return
        finally:
            self._finish()

    def _take(self) -> Job | None:
        """Return the next job: held, else handed over or reserved (waiting while idle)."""
        if self.reaper is not None:
            self.reaper.maybe_reap(idle=self.idling)
        if self.signals.paused:
            self._pause()
            return None
        job, settled = self.hand.next_held()
        self._report(settled)
        if job is not None:
            return job
        self._report(self.hand.flush_kept())  # no next job to take them along
        self.between_jobs()
        if self.hand.out_of_tickets() or not self._await_turn():
            return None  # (round the loop: it looks at signals and limits first)
        jobs, wake = self._reserve()
        while not jobs and self._idle(wake) and self._woken_as_left():
            jobs, wake = self._reserve()  # woken by a message (a hand-off, mostly)
        if not jobs:
            return None
        if len(jobs) == 1 and not len(self.hand):
            return jobs[0]  # what add() then take() would give, without their locks
        self.hand.add(jobs)
        return self.hand.take()

    def _run(self, job: Job) -> tuple[Outcome, float]:
        """Run one job; return its outcome and how long it ran."""
        # (The heartbeat thread shows the job once it notices it: short jobs cost no title.)
        self.current = job
        self.limits = self.runner.limits_of(job)
        self.idling = False
        self.hand.taken += 1
        self.on_job_start(job)
        started = time.monotonic()
        self.heartbeater.watch(job, self.limits)
        if self.leadership is not None:
            self.leadership.release(soon=True)  # as the job starts: the next idle child leads
        try:
            outcome = self.runner.run(job, self._pre_abort)
        finally:
            self.heartbeater.unwatch()
        return outcome, time.monotonic() - started

    def _settle(self, job: Job, outcome: Outcome, elapsed: float) -> bool:
        """Complete or dispose of a job that ran, and report what settled; True to stop."""
        self.hand.ran(job, elapsed)
        stop = False
        if outcome is Outcome.COMPLETED:
            settled = self.hand.complete(job, elapsed, self._going_on())
        else:
            self._report(self.hand.flush_kept())  # kept completions wait for short jobs only
            settled = [(job, outcome)]
        if outcome is Outcome.ABORTED:
            reason = self.guard.reason or "aborted"
            if reason == "timeout":
                log_job(logging.ERROR, job, "job %s timed out: still running after its limit "
                        "of %gs", job.jid, self.limits.hard)
            else:
                log_job(logging.WARNING, job, "job %s aborted: %s", job.jid, reason)
            stop = self.on_aborted(job, reason)
        self.current = None
        self._report(settled)
        return stop

    def _report(self, settled: Settled) -> None:
        for job, outcome in settled:
            self.report(job, outcome)

    def _pause(self) -> None:
        """Hand back what is held and wait, taking nothing, until resumed or stopped."""
        self.hand.adopt_handed()  # (handed over after registering as idle)
        self._report(self.hand.hand_back())
        self.between_jobs()
        self._idle_title()
        self.waiter.wait(min(self.recheck, self._time_left()), self.should_continue)
        self.waiter.drain()  # wake-ups while paused must not make wait() spin

    def _limit_reached(self) -> bool:
        """Tell whether the loop is done: out of tickets with nothing held, or out of time."""
        hand = self.hand
        if not len(hand) and not hand.coming and hand.out_of_tickets():
            return True
        return self._time_left() <= 0

    def _time_left(self) -> float:
        """Return the seconds left before --max-duration (infinite without one)."""
        duration = self.config.max_duration or math.inf
        return duration - (time.monotonic() - self.started)

    def _going_on(self) -> bool:
        """Tell whether the loop will want another job (no stop, pause, or limit reached)."""
        if self.signals.stopping or self.signals.paused or not self.should_continue():
            return False
        return not self.hand.out_of_tickets() and self._time_left() > 0

    def _woken_as_left(self) -> bool:
        """Tell whether an idle loop woken by a message may reserve again at once."""
        if not self._going_on():
            return False
        if self.reaper is not None:
            self.reaper.maybe_reap(idle=self.idling)
        return self._await_turn()

    # -- heartbeat thread -------------------------------------------------------------------
    def noticed(self, job: Job, what: str, elapsed: float) -> None:
        """Show `job` ("tick"), hand the held jobs back ("long"), or stop it at a limit."""
        if what == "tick":
            self._tick(job, elapsed)
        elif what == "long" and self.hand.holding():
            log.debug("job %s runs long: handing back the jobs held ahead", job.jid)
            self._report(self.hand.hand_back())
        elif what == "soft" and self.current is job:
            soft = self.limits.soft
            log_job(logging.WARNING, job, "job %s: soft time limit of %gs reached, raising "
                    "SoftTimeLimitExceeded in it", job.jid, soft)
            self.guard.interrupt(SoftTimeLimitExceeded(
                f"job {job.jid} reached its soft time limit of {soft:g}s"))
        elif what == "timeout" and self.current is job and self.hard_limit_in_thread:
            log_job(logging.WARNING, job, "job %s: time limit of %gs reached, stopping it",
                    job.jid, self.limits.hard)
            self.guard.abort("timeout")

    def _tick(self, job: Job, elapsed: float) -> None:
        """End the term grace, and show the job (on noticing it, then every second)."""
        from django_qless.core.workers.proctitle import child_title, set_title, stop_note

        if self.signals.drain_over():
            log_job(logging.WARNING, job, "job %s still running after the %gs term grace; "
                    "giving it back", job.jid, self.config.term_grace)
            self.guard.abort("shutdown")
        if self.reaper is not None and self.signals.draining and not self._told_draining:
            self._told_draining = True  # (the serial worker beats between jobs: say it now)
            self.reaper.reap(beat_only=True)
        with self._title_lock:
            if self.current is job:
                set_title(child_title(self.name, self.queues, jid=job.jid,
                                      klass=job.klass_name, queue=job.queue_name,
                                      elapsed=elapsed, note=stop_note(self.signals)))

    def _idle_title(self) -> None:
        from django_qless.core.workers.proctitle import child_title, set_title

        with self._title_lock:
            set_title(child_title(self.name, self.queues, paused=self.signals.paused))

    def _going_idle(self) -> float:
        """Show the loop idle; return how long it may wait (--interval, --max-duration)."""
        self.idling = True
        self._idle_title()
        return min(self.recheck, max(self._time_left(), 0.005))

    # -- idle: the leader token, reserves, waits ----------------------------------------------
    def _await_turn(self) -> bool:
        """Take the idle-leader token, or wait for it or a hand-off (False: interrupted)."""
        lead = self.leadership
        if lead is None or lead.try_take():
            return True
        return lead.await_turn(self._going_idle(), self.should_continue, self.check_every)

    def _reserve(self) -> tuple[list[Job], float | None]:
        """Take a hand-off, jobs held but lost, or reserve; else the seconds until work is due."""
        waiter, hand = self.waiter, self.hand
        # A child that closed its connections reserves once before it subscribes: a waiting
        # job then starts after one reconnect (after a lost hand-off: once subscribed).
        if self.leadership is not None and self.leadership.went_cold() and not (
                waiter.subscribed or waiter.lost):
            jobs, _ = hand.reserve()
            if jobs:
                return jobs, None
        waiter.ensure_subscribed()
        waiter.drain()  # (a reply read in part is read whole: NodeConnection.pump)
        jobs = hand.handed()
        if not jobs and waiter.lost and waiter.subscribed:
            waiter.lost = False
            jobs = hand.reclaim()  # nothing runs or is held now: any such job is lost
        if jobs:
            return jobs, None
        jobs, wake = hand.reserve()
        if jobs and waiter.subscribed:
            # Registered as idle meanwhile, it may have been handed a job too: hold it, so
            # it goes back to waiting if this job runs long.
            waiter.drain()
            self.hand.adopt_handed()
        return jobs, wake

    def _idle(self, wake: float | None) -> bool:
        """Block until a wake-up, a signal, or the next due time; True if a message came."""
        timeout = self._going_idle()
        if wake is not None:  # (a lock expiring "now" reports 0 during its grace: no spin)
            timeout = min(timeout, max(wake, 0.005))
        if self.reaper is not None:
            timeout = min(timeout, max(self.reaper.seconds_left(idle=True), 0.005))
        return self.waiter.wait(timeout, self.should_continue)

    # -- start and end ----------------------------------------------------------------------
    def _hello(self) -> None:
        """Tell the engine this worker's host, pid and queues (shown by the dashboard)."""
        queues = [str(q) for q in self.queues][:100]
        for client in self.routes.served():
            try:
                client.workers.hello(self.name, socket.gethostname()[:255] or "", os.getpid(),
                                     queues, beat=self.config.beat, group=self.group)
            except QlessError as exc:  # the dashboard's info only: never stop a worker for it
                log.warning("could not record worker info for %s: %s", self.name, exc)

    def _finish(self) -> None:
        """Release unstarted jobs, stop threads, deregister, run stop hooks."""
        if self.leadership is not None:
            self.leadership.release()
        self.waiter.stop_hand_offs()
        self.hand.adopt_handed()
        self._report(self.hand.hand_back())
        self.hand.release_spare()
        self.heartbeater.stop()
        self.waiter.close()
        for client in self.routes.served():
            try:
                client.workers.deregister(self.name)
            except QlessError as exc:
                log.warning("could not deregister %s: %s", self.name, exc)
        self.hooks.on_worker_stop(self)
