"""The reserve → run → complete loop shared by the serial worker and each forked child.

Hot path: one round trip per job, or per several short jobs. `complete.reserve` completes
the finished job and takes the next ones in the same script call; after a short job it is
only sent, and the job held ahead runs while Redis works; a short job followed by one
expected short keeps its completion for a later job's call, which completes them all
(hand.py owns the held jobs and those completions). How an idle loop gets its next job
(hand-off, wake-up, reserve) is in taking.py; the shards its queues are in, in shards.py.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django_qless.core.exceptions import QlessError, SoftTimeLimitExceeded
from django_qless.core.registry import NO_LIMITS
from django_qless.core.workers.hand import JobBudget, JobHand, SharedJobPool
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
from django_qless.core.workers.taking import JobTaker
from django_qless.core.workers.wakeup import WakeWaiter
from django_qless.core.workers.worker_config import WorkerConfig

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.workers.leadership import Leadership

__all__ = ["JobLoop"]

log = logging.getLogger("django_qless.worker")

# A job that runs this long hands the jobs held ahead back and sends the kept completions.
HAND_BACK_AFTER = 0.1
_DONE = {Outcome.COMPLETED: "done", Outcome.SETTLED: "settled by the job itself"}


class JobLoop:
    """Take jobs and run them in this process until told to stop."""

    #: Wait at most this long while idle (the engine keeps an idle registration <= 3600 s).
    idle_cap = 3599.0
    #: Whether the heartbeat thread stops a job at its hard limit (not a child: its supervisor).
    hard_limit_in_thread = False

    def __init__(
        self,
        config: WorkerConfig,
        hooks: WorkerHooksProtocol,
        name: str,
        signals: SignalState,
        *,
        resume: bool = False,
        max_jobs: int = 0,
        pool: SharedJobPool | None = None,
        reaper: LeaseReaper | None = None,
        leadership: Leadership | None = None,
    ) -> None:
        self.config = config
        if "django_qless.core.integrations" in sys.modules:  # (else none are installed)
            hooks = sys.modules["django_qless.core.integrations"].with_installed_hooks(hooks)
        self.hooks = hooks  # with the integrations' (observability.md)
        self.name = name
        self.group = name  # whose beats show this loop alive (a child: its supervisor's name)
        self.signals = signals
        self.resume = resume
        # Jobs this loop may still ask for: its own cap, and the worker's shared pool.
        self.budget = JobBudget(max_jobs, pool)
        # One keyspace (a Client) or queues over a cluster's shards (a ShardedClient).
        self.client: Deployment = config.make_client(worker_name=name)
        self.selection = QueueSelection(
            config.queues, known_queues(self.client), refresh=config.queue_refresh
        )
        self.routes = QueueRoutes(self.client, self.selection, refresh=config.queue_refresh)
        self.reserver = make_reserver(config.reserver, self.selection)
        self.guard = AbortGuard()
        self.sandbox = Sandbox(config.sandbox_root, name)
        self.runner = JobRunner(config, hooks, config.registry, self.sandbox, self.guard)
        self.waiter = WakeWaiter(self.routes, signals.wake_pipe, name)
        self.started = time.monotonic()
        self.done = 0
        self.failed = 0
        self.current: Job | None = None
        self.limits = NO_LIMITS  # the running job's (JobRunner.limits_of)
        # Only where no supervisor does it (the serial worker); see reaper.py.
        self.reaper = reaper
        self._build_parts(leadership)
        # Run time of each job until its outcome is known (a completion may be read later).
        self._ran: dict[str, float] = {}
        # Completions are news at -v, noise otherwise.
        self._done_level = logging.INFO if config.verbosity >= 1 else logging.DEBUG
        # Outcomes are counted by the job thread and, for a completion read by the heartbeat
        # thread (a long job hands the held jobs back), by that thread.
        self._count_lock = threading.Lock()
        # The heartbeat thread sets the running title, the loop the idle one: this keeps a
        # late "running" from overwriting "idle".
        self._title_lock = threading.Lock()
        self._told_draining = False

    def _build_parts(self, leadership: Leadership | None) -> None:
        """Build the hand (held jobs, completions), the taker and the heartbeat thread."""
        config = self.config
        self.hand = JobHand(self.name, self.waiter, self.budget, prefetch=config.prefetch,
                            report=self._settled, will_take_after=self._will_take_after)
        self.taker = JobTaker(
            self.name, self.routes, self.reserver, self.waiter, self.hand,
            interval=config.interval, idle_cap=self.idle_cap, time_left=self._time_left,
            on_idle=self._idle_title, keep_waiting=self.should_continue, reaper=self.reaper,
            leadership=leadership, idle_disconnect=config.idle_disconnect,
        )
        self.hand.taker = self.taker
        self.heartbeater = Heartbeater(
            self._on_lock_lost, on_due=self._on_due, long_after=HAND_BACK_AFTER,
            on_tick=self._tick,
        )

    @property
    def taken(self) -> int:
        """Return how many jobs this loop started."""
        return self.hand.taken

    # -- WorkerInfo -------------------------------------------------------------------------
    @property
    def queues(self) -> Sequence[str]:
        """Return the queue specs this loop serves."""
        return self.config.queues

    # -- signals ---------------------------------------------------------------------------
    def arm_signals(self, on_signal: Callable[[int], None]) -> None:
        """Install the handlers (main thread): `on_signal` acts on each signal, and aborts
        asked for by other threads come to the job as URG."""
        self.signals.callback = on_signal
        self.signals.on_kick = self.guard.deliver
        self.signals.install()
        self.guard.kick_by_signal()

    def disarm_signals(self) -> None:
        """Restore the handlers `arm_signals` replaced."""
        self.guard.kick = None
        self.signals.on_kick = None
        self.signals.uninstall()

    # -- overridables -----------------------------------------------------------------------
    def _on_lock_lost(self, job: Job, why: str) -> None:
        """Called from the heartbeat thread when the engine refused a heartbeat."""
        if self.current is job:
            self.guard.abort("lock_lost")

    def _on_due(self, job: Job, what: str) -> None:
        """Heartbeat thread: `job` runs long (the jobs held ahead go back to waiting), or
        reached its soft limit (raise inside it) or its hard one ("timeout")."""
        hand = self.hand
        if what == "long" and (len(hand) or hand.in_flight or hand.kept):
            log.debug("job %s runs long: handing back the jobs held ahead", job.jid)
            hand.hand_back()
        elif what == "soft" and self.current is job:
            log_job(logging.WARNING, job, "job %s: soft time limit of %gs reached, raising "
                    "SoftTimeLimitExceeded in it", job.jid, self.limits.soft)
            self.guard.interrupt(SoftTimeLimitExceeded(
                f"job {job.jid} reached its soft time limit of {self.limits.soft:g}s"))
        elif what == "timeout" and self.current is job and self.hard_limit_in_thread:
            log_job(logging.WARNING, job, "job %s: time limit of %gs reached, stopping it",
                    job.jid, self.limits.hard)
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
        self._hello()
        self.heartbeater.start()
        try:
            if self.resume:
                self.hand.add(self.taker.held_jobs())
            self._loop()
        finally:
            self._finish()

    def _loop(self) -> None:
        """Take a job, run it, report it; until a stop, a limit or the supervisor's death."""
        while not (self.signals.stopping or self._limit_reached() or not self.should_continue()):
            if self.reaper is not None:
                self.reaper.maybe_reap(idle=self.taker.idling)
            if self.signals.paused:
                self._pause()
                continue
            job = self.hand.next_held()  # held ahead, or brought by a completion's reply
            if job is None:
                job = self._take()
            if job is None:
                continue
            # A stop that landed during the reserve: do not start the job (released later).
            if self.signals.stop_requests or not self.should_continue():
                self.hand.put_back(job)
                return
            if self._perform(job):
                return

    def _take(self) -> Job | None:
        """Reserve jobs (or wait for them while idle); return the first, holding the rest."""
        self.hand.flush_kept()  # no next job to take them along
        self.between_jobs()
        if self._out_of_tickets():
            return None  # the loop's check ends it
        if not self.taker.await_turn():
            return None  # another child is the idle leader; a signal woke us
        jobs, wake = self.taker.reserve()
        while not jobs and self.taker.idle(wake) and self._woken_as_left():
            # A message woke the idle loop (a hand-off, mostly): take it now, not after the
            # checks of the loop, which find what they found before the wait.
            jobs, wake = self.taker.reserve()
        if not jobs:
            return None  # (round the loop: it looks at signals and limits first)
        if len(jobs) == 1 and not len(self.hand):
            return jobs[0]  # what add() then take() would give, without their locks
        self.hand.add(jobs)
        return self.hand.take()

    def _pause(self) -> None:
        """Hand back what is held and wait, taking nothing, until resumed or stopped."""
        self._hand_back()  # held ahead, or handed over after registering as idle
        self.between_jobs()
        self._idle_title()
        self.waiter.wait(min(self.config.interval, self.idle_cap, self._time_left()),
                         self.should_continue)
        self.waiter.drain()  # wake-ups while paused must not make wait() spin

    def _limit_reached(self) -> bool:
        """Tell whether the loop is done: out of tickets with nothing held, or out of time."""
        if not len(self.hand) and not self.hand.coming and self._out_of_tickets():
            return True
        return self._time_left() <= 0

    def _out_of_tickets(self) -> bool:
        """Tell whether the budget grants this loop no further job."""
        return self.budget.limited and self.budget.grant(1, self.hand.committed()) == 0

    def _time_left(self) -> float:
        """Return the seconds left before --max-duration (infinite without one)."""
        duration = self.config.max_duration
        if not duration:
            return float("inf")
        return duration - (time.monotonic() - self.started)

    def _woken_as_left(self) -> bool:
        """Tell whether an idle loop woken by a message may reserve again at once.

        Idle, it holds no job, keeps no completion and keeps its ticket: only a signal,
        --max-duration, the supervisor's death, the reaper and the token need a look.
        """
        signals = self.signals
        if signals.graceful or signals.stop_requests or signals.paused:
            return False
        if not self.should_continue():
            return False
        if self.reaper is not None:
            self.reaper.maybe_reap(idle=self.taker.idling)
        if self.config.max_duration and self._time_left() <= 0:
            return False
        return self.taker.await_turn()

    def _perform(self, job: Job) -> bool:
        """Run one job and settle it; return True to stop the loop."""
        # No title here: the heartbeat thread sets "running" once it notices the job (within
        # its check interval), so a stream of short jobs costs no setproctitle per job.
        self.current = job
        self.limits = self.runner.limits_of(job)
        self.taker.idling = False
        self.hand.taken += 1
        self.on_job_start(job)
        started = time.monotonic()
        self.heartbeater.watch(job, self.limits)
        self.taker.pass_turn(soon=True)  # as the job starts: the next idle child leads
        try:
            outcome = self.runner.run(job, self._pre_abort)
        finally:
            self.heartbeater.unwatch()
        elapsed = time.monotonic() - started
        self._ran[job.jid] = elapsed
        self.hand.ran(job, elapsed)
        if outcome is Outcome.COMPLETED:
            completed = self.hand.complete(job, elapsed)
            self.current = None
            if completed is not None:  # (None: sent ahead, reported when its reply is read)
                self._settled(job, completed)
            return False
        self.hand.flush_kept()  # kept completions wait for short jobs only
        stop = outcome is Outcome.ABORTED and self._aborted(job)
        self.current = None
        self._settled(job, outcome)
        return stop

    def _aborted(self, job: Job) -> bool:
        """Log and dispose of an aborted job; return True to stop the loop."""
        reason = self.guard.reason or "aborted"
        if reason == "timeout":
            log_job(logging.ERROR, job, "job %s timed out: still running after its limit of "
                    "%gs", job.jid, self.limits.hard)
        else:
            log_job(logging.WARNING, job, "job %s aborted: %s", job.jid, reason)
        return self.on_aborted(job, reason)

    def _settled(self, job: Job, outcome: Outcome) -> None:
        """Count a settled job and report it."""
        with self._count_lock:
            if outcome is Outcome.FAILED:
                self.failed += 1
            elif outcome in (Outcome.COMPLETED, Outcome.SETTLED):
                self.done += 1
        if outcome is Outcome.COMPLETED:
            job.open_gates()  # flow members of other shards waiting on it
        elapsed = self._ran.pop(job.jid, None)
        # A job that settled itself (retried, moved, ...) was logged by whoever did it.
        level = self._done_level if outcome is Outcome.COMPLETED else logging.DEBUG
        if elapsed is not None and outcome in _DONE and log.isEnabledFor(level):
            log.log(level, "job %s %s %s in %.0f ms", job.jid, job.klass_name, _DONE[outcome],
                    elapsed * 1000)
        self.on_job_end(job, outcome)

    def _hand_back(self) -> None:
        """Release the jobs held ahead or handed over (none is running), after reading the
        calls in flight (job thread)."""
        self.hand.adopt_handed()
        self.hand.hand_back()

    def _will_take_after(self) -> bool:
        """Tell whether the loop will want another job once the running one is done."""
        if self.signals.stopping or self.signals.paused or not self.should_continue():
            return False
        if self._out_of_tickets():
            return False
        return not self.config.max_duration or self._time_left() > 0

    def _hello(self) -> None:
        """Tell the engine this worker's host, pid and queues (shown by the dashboard)."""
        queues = [str(q) for q in self.config.queues][:100]
        for client in self.routes.served():
            try:
                client.workers.hello(self.name, socket.gethostname()[:255] or "", os.getpid(),
                                     queues, beat=self.config.beat, group=self.group)
            except QlessError as exc:  # the dashboard's info only: never stop a worker for it
                log.warning("could not record worker info for %s: %s", self.name, exc)

    def _finish(self) -> None:
        """Release unstarted jobs, stop threads, deregister, run stop hooks."""
        self.taker.pass_turn()
        self.waiter.stop_hand_offs()
        self._hand_back()
        self.budget.release_spare(self.hand.committed())
        self.heartbeater.stop()
        self.waiter.close()
        for client in self.routes.served():
            try:
                client.workers.deregister(self.name)
            except QlessError as exc:
                log.warning("could not deregister %s: %s", self.name, exc)
        self.hooks.on_worker_stop(self)

    # -- titles ----------------------------------------------------------------------------
    def _tick(self, job: Job, elapsed: float) -> None:
        """Give the job back once the term grace is over; show it (heartbeat thread: on
        noticing the job, then every second)."""
        from django_qless.core.workers.proctitle import child_title, set_title, stop_note

        if self.signals.drain_over():
            log_job(logging.WARNING, job, "job %s still running after the %gs term grace; "
                    "giving it back", job.jid, self.config.term_grace)
            self.guard.abort("shutdown")
        if self.reaper is not None and self.signals.draining and not self._told_draining:
            # The serial worker beats between jobs: say "draining" now, not after the job.
            self._told_draining = True
            self.reaper.reap(beat_only=True)
        with self._title_lock:
            if self.current is job:
                set_title(child_title(self.name, self.config.queues, jid=job.jid,
                                      klass=job.klass_name, queue=job.queue_name,
                                      elapsed=elapsed, note=stop_note(self.signals)))

    def _idle_title(self) -> None:
        from django_qless.core.workers.proctitle import child_title, set_title
        with self._title_lock:
            set_title(child_title(self.name, self.config.queues, paused=self.signals.paused))
