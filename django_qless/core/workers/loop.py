"""`JobLoop`: take a job, run it, report it; the loop of the serial worker and of each child.

A job comes from the hand (held ahead, or brought by a completion's reply), else from a
hand-off or a reserve per shard in the reserver's order, else after an idle wait. Its
completion goes through the hand (hand.py), which returns what settled for `report`.
"""

from __future__ import annotations

import logging
import math
import os
import random
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from django_qless.core.exceptions import QlessConnectionError, QlessError, SoftTimeLimitExceeded
from django_qless.core.hotpath import RESERVE_QUEUES_MAX
from django_qless.core.registry import NO_LIMITS
from django_qless.core.worker_options import WorkerConfig
from django_qless.core.workers.hand import JobBudget, JobHand, Settled, SharedJobPool
from django_qless.core.workers.heartbeat import Heartbeater
from django_qless.core.workers.reaper import LeaseReaper
from django_qless.core.workers.runner import (
    JobRunner,
    Outcome,
    Sandbox,
    WorkerHooksProtocol,
    log_job,
)
from django_qless.core.workers.shards import (
    Deployment,
    QueueRoutes,
    QueueSelection,
    known_queues,
    make_reserver,
)
from django_qless.core.workers.shutdown import AbortGuard, SignalState
from django_qless.core.workers.wakeup import WakeWaiter

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job
    from django_qless.core.workers.leadership import Leadership

__all__ = ["HAND_BACK_AFTER", "JobLoop"]

log = logging.getLogger("django_qless.worker")

HAND_BACK_AFTER = 0.1  # a job running this long hands the held jobs back
IDLE_CAP = 3599.0  # the longest idle wait (the engine keeps a registration <= 3600 s)
_DONE = {Outcome.COMPLETED: "done", Outcome.SETTLED: "settled by the job itself"}
_TRANSIENT = (QlessConnectionError, redis.ConnectionError, redis.TimeoutError, OSError)


class JobLoop:
    """Take jobs and run them in this process until told to stop."""

    hard_limit_in_thread = False  # stop a job at its hard limit here (a child: its supervisor)

    def __init__(self, config: WorkerConfig, hooks: WorkerHooksProtocol, name: str,
                 signals: SignalState, *, resume: bool = False, max_jobs: int = 0,
                 pool: SharedJobPool | None = None, reaper: LeaseReaper | None = None,
                 leadership: Leadership | None = None) -> None:
        self.config = config
        self.queues = config.queues  # (WorkerInfo)
        if "django_qless.core.integrations" in sys.modules:  # (else none are installed)
            hooks = sys.modules["django_qless.core.integrations"].with_installed_hooks(hooks)
        self.hooks = hooks
        self.name = name
        self.group = name  # whose beats show this loop alive (a child: its supervisor's name)
        self.signals = signals
        self.resume = resume
        self.client: Deployment = config.make_client(worker_name=name)
        selection = QueueSelection(config.queues, known_queues(self.client),
                                   refresh=config.queue_refresh)
        self.routes = QueueRoutes(self.client, selection, refresh=config.queue_refresh)
        self.reserver = make_reserver(config.reserver, selection)
        self.guard = AbortGuard()
        self.runner = JobRunner(config, hooks, config.registry,
                                Sandbox(config.sandbox_root, name), self.guard)
        self.waiter = WakeWaiter(self.routes, signals.wake_pipe, name)
        self.hand = JobHand(name, self.waiter, JobBudget(max_jobs, pool),
                            prefetch=config.prefetch)
        self.heartbeater = Heartbeater(self._on_lock_lost, on_due=self._on_due,
                                       long_after=HAND_BACK_AFTER, on_tick=self._tick)
        self.reaper = reaper  # only where no supervisor reaps (the serial worker)
        self.leadership = leadership  # None: always registers when idle (serial worker)
        self.started = time.monotonic()
        self.done = self.failed = 0
        self.current: Job | None = None
        self.limits = NO_LIMITS  # the running job's (JobRunner.limits_of)
        self._ran: dict[str, float] = {}  # run time of each job until its outcome is read
        self._done_level = logging.INFO if config.verbosity >= 1 else logging.DEBUG
        # The job and heartbeat threads both report (a long job hands the held jobs back);
        # the heartbeat thread sets the running title, the loop the idle one.
        self._count_lock = threading.Lock()
        self._title_lock = threading.Lock()
        self._told_draining = False
        self.check_every = 1.0  # seconds between supervisor checks waiting for the token
        self.idling = False  # the last reserve found nothing (no job started since)
        self._listening = False  # subscribed once while waiting for the token
        self._disconnected = self._cold = False  # (see _disconnect)
        self._backoff = 0.0

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
        elapsed = self._ran.pop(job.jid, None)
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

    def _on_lock_lost(self, job: Job, why: str) -> None:
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
                self.hand.add(self._held_jobs())
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
        # No title here: the heartbeat thread sets "running" once it notices the job, so a
        # stream of short jobs costs no setproctitle per job.
        self.current = job
        self.limits = self.runner.limits_of(job)
        self.idling = False
        self.hand.taken += 1
        self.on_job_start(job)
        started = time.monotonic()
        self.heartbeater.watch(job, self.limits)
        self._pass_turn(soon=True)  # as the job starts: the next idle child leads
        try:
            outcome = self.runner.run(job, self._pre_abort)
        finally:
            self.heartbeater.unwatch()
        return outcome, time.monotonic() - started

    def _settle(self, job: Job, outcome: Outcome, elapsed: float) -> bool:
        """Complete or dispose of a job that ran, and report what settled; True to stop."""
        self._ran[job.jid] = elapsed
        self.hand.ran(job, elapsed)
        stop = False
        if outcome is Outcome.COMPLETED:
            settled = self.hand.complete(job, elapsed, self._plan, self._going_on())
        else:
            self._report(self.hand.flush_kept())  # kept completions wait for short jobs only
            stop = outcome is Outcome.ABORTED and self._aborted(job)
            settled = [(job, outcome)]
        self.current = None
        self._report(settled)
        return stop

    def _report(self, settled: Settled) -> None:
        for job, outcome in settled:
            self.report(job, outcome)

    def _aborted(self, job: Job) -> bool:
        """Log and dispose of an aborted job; return True to stop the loop."""
        reason = self.guard.reason or "aborted"
        if reason == "timeout":
            log_job(logging.ERROR, job, "job %s timed out: still running after its limit of "
                    "%gs", job.jid, self.limits.hard)
        else:
            log_job(logging.WARNING, job, "job %s aborted: %s", job.jid, reason)
        return self.on_aborted(job, reason)

    def _pause(self) -> None:
        """Hand back what is held and wait, taking nothing, until resumed or stopped."""
        self._hand_back()  # held ahead, or handed over after registering as idle
        self.between_jobs()
        self._idle_title()
        self.waiter.wait(min(self.config.interval, IDLE_CAP, self._time_left()),
                         self.should_continue)
        self.waiter.drain()  # wake-ups while paused must not make wait() spin

    def _hand_back(self) -> None:
        """Release the jobs held or handed over, after reading the calls in flight."""
        self.hand.adopt_handed()
        self._report(self.hand.hand_back())

    def _limit_reached(self) -> bool:
        """Tell whether the loop is done: out of tickets with nothing held, or out of time."""
        hand = self.hand
        if not len(hand) and not hand.coming and hand.out_of_tickets():
            return True
        return self._time_left() <= 0

    def _time_left(self) -> float:
        """Return the seconds left before --max-duration (infinite without one)."""
        duration = self.config.max_duration
        return duration - (time.monotonic() - self.started) if duration else math.inf

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
    def _on_due(self, job: Job, what: str) -> None:
        """`job` runs long (the held jobs go back), or reached its soft or hard limit."""
        limits = self.limits
        if what == "long" and self.hand.holding():
            log.debug("job %s runs long: handing back the jobs held ahead", job.jid)
            self._report(self.hand.hand_back())
        elif what == "soft" and self.current is job:
            log_job(logging.WARNING, job, "job %s: soft time limit of %gs reached, raising "
                    "SoftTimeLimitExceeded in it", job.jid, limits.soft)
            self.guard.interrupt(SoftTimeLimitExceeded(
                f"job {job.jid} reached its soft time limit of {limits.soft:g}s"))
        elif what == "timeout" and self.current is job and self.hard_limit_in_thread:
            log_job(logging.WARNING, job, "job %s: time limit of %gs reached, stopping it",
                    job.jid, limits.hard)
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

    # -- idle: the leader token, reserves, waits ----------------------------------------------
    def _await_turn(self) -> bool:
        """Wait, without Redis, for the idle-leader token or a hand-off; False if a signal,
        the supervisor's death or the end of the wait came first."""
        lead = self.leadership
        if lead is None or lead.try_take():
            self._disconnected = False
            return True
        if not self._listening and not self._disconnected:
            if self._until_quiet(lead) <= 0:
                self._disconnect()  # (a new child of an idle worker: nothing to listen for)
            else:  # once: the first turn as leader then needs no subscribe round trip
                self._listening = True
                self.waiter.ensure_subscribed()
        self.idling = True
        self._idle_title()
        lead.want(True)
        try:
            deadline = time.monotonic() + min(self._recheck_after(),
                                              max(self._time_left(), 0.005))
            while not lead.held and not self.waiter.handed:
                step = min(deadline - time.monotonic(), self.check_every)
                if step <= 0:
                    return False
                if not self._disconnected:
                    quiet_in = self._until_quiet(lead)
                    if quiet_in <= 0:
                        self._disconnect()
                    else:
                        step = min(step, quiet_in)
                if self.waiter.wait_quietly(lead.notify_fd, step) or not self.should_continue():
                    return False  # a signal, or the supervisor died: the loop acts on it
            self._disconnected = False
            return True
        finally:
            lead.want(False)  # the token, if it comes now, goes on to the next child

    def _until_quiet(self, lead: Leadership) -> float:
        """Return the seconds until the token stayed `idle_disconnect` with one leader."""
        quiet = self.config.idle_disconnect
        return quiet - lead.steady_for() if quiet else math.inf

    def _disconnect(self) -> None:
        """Close this child's connections until it leads (it has nothing to say or hear).

        An idle connection costs Redis CPU (its cron visits each), but reopening one costs
        minutes of that: only a child the token stayed away from for `idle_disconnect`.
        """
        self._disconnected = self._cold = True
        self._listening = False  # subscribe again at the start of the next wait
        self.waiter.disconnect()
        self.routes.deployment.disconnect()
        log.debug("leader unchanged for %gs: connections closed until this child leads",
                  self.config.idle_disconnect)

    def _pass_turn(self, *, soon: bool = False) -> None:
        """Give the idle-leader token up (`soon`: a job starts; the helper unlocks it)."""
        if self.leadership is not None:
            self.leadership.release(soon=soon, watch=self.waiter.sockets)

    def _reserve(self) -> tuple[list[Job], float | None]:
        """Take a hand-off, else jobs held but lost, else reserve (subscribed first); also
        return the seconds until due work when there is none.

        A child that closed its connections reserves once before it subscribes, without
        registering: a waiting job then starts after one reconnect.
        """
        waiter = self.waiter
        cold, self._cold = self._cold, False
        # (After a lost hand-off, the jobs it holds come first, once subscribed.)
        if cold and not waiter.subscribed and not waiter.lost:
            jobs, _ = self._reserve_once()
            if jobs:
                return jobs, None
        waiter.ensure_subscribed()
        waiter.drain()  # (a reply read in part is read whole: NodeConnection.pump)
        messages, client = waiter.take_handed(), waiter.hand_client
        jobs = client.handed_jobs(messages, self.name) if messages and client else []
        if not jobs and waiter.lost and waiter.subscribed:
            waiter.lost = False
            jobs = self._held_jobs()  # nothing runs or is held now: any such job is lost
        if jobs:
            self._backoff = 0.0
            return jobs, None
        jobs, wake = self._reserve_once()
        if jobs and waiter.subscribed:
            # Registered as idle meanwhile, it may have been handed a job too: hold it, so
            # it goes back to waiting if this job runs long.
            waiter.drain()
            self.hand.adopt_handed()
        return jobs, wake

    def _plan(self) -> list[tuple[Client, list[str]]]:
        """Return this attempt's engine calls: (shard client, its queues in order)."""
        return [(client, queues[start:start + RESERVE_QUEUES_MAX])
                for client, queues in self.routes.plan(self.reserver.order())
                for start in range(0, len(queues), RESERVE_QUEUES_MAX)]

    def _reserve_once(self) -> tuple[list[Job], float | None]:
        """Reserve one job from the first shard that has one; else the next due time."""
        jobs: list[Job] = []
        wake: float | None = None
        try:
            plan = self._plan()
            # Register for a hand-off only in the shard whose channel the waiter hears.
            ttl = None
            if (len(plan) == 1 and plan[0][0] is self.waiter.hand_client
                    and self.waiter.subscribed):
                ttl = self._recheck_after() + 1.0
            for client, queues in plan:
                jobs, due = client.reserve(queues, 1, self.name, wait=ttl)
                if jobs:
                    break
                if due is not None:
                    wake = due if wake is None else min(wake, due)
        except _TRANSIENT as exc:
            self._backoff = min(max(self._backoff * 2, 0.1), 10.0)
            log.warning("reserve failed (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff * (0.5 + random.random())  # noqa: S311
        except QlessError as exc:
            self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
            log.error("reserve refused (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff
        self._backoff = 0.0
        return (jobs, None) if jobs else ([], wake)

    def _recheck_after(self) -> float:
        """Return how long an idle wait lasts at most (the safety re-check: --interval)."""
        return min(self.config.interval, IDLE_CAP)

    def _idle(self, wake: float | None) -> bool:
        """Block until a wake-up, a signal, or the next due time; True if a message came."""
        self.idling = True
        self._idle_title()
        timeout = min(self._recheck_after(), max(self._time_left(), 0.005))
        if wake is not None:  # (a lock expiring "now" reports 0 during its grace: no spin)
            timeout = min(timeout, max(wake, 0.005))
        if self.reaper is not None:
            timeout = min(timeout, max(self.reaper.seconds_left(idle=True), 0.005))
        return self.waiter.wait(timeout, self.should_continue)

    def _held_jobs(self) -> list[Job]:
        """Return the jobs this worker still holds in its shards (resume, hand-offs lost)."""
        held: list[Job] = []
        for client in self.routes.served():
            try:
                jids = client.workers[self.name]["jobs"]
                jobs = client.jobs.get_many(*jids) if jids else []
            except QlessError as exc:
                log.error("could not list the jobs this worker holds: %s", exc)
                continue
            held += [j for j in jobs if j.state == "running" and j.worker_name == self.name]
        if held:
            log.info("taking back %d held job(s): %s", len(held), ", ".join(j.jid for j in held))
        return held

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
        self._pass_turn()
        self.waiter.stop_hand_offs()
        self._hand_back()
        self.hand.budget.release_spare(self.hand.committed())
        self.heartbeater.stop()
        self.waiter.close()
        for client in self.routes.served():
            try:
                client.workers.deregister(self.name)
            except QlessError as exc:
                log.warning("could not deregister %s: %s", self.name, exc)
        self.hooks.on_worker_stop(self)
