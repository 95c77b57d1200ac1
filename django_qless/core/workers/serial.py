"""`SerialWorker`: one process, one job at a time, jobs run in this process.

Aborts (lock lost, canceled, moved, time limit) are raised into the job as `JobAborted`;
signals raise it from the handler. docs/worker.md lists what each signal does.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING, Any

from django_qless.core.accessors import REQUESTS
from django_qless.core.exceptions import QlessError
from django_qless.core.worker_options import WorkerConfig, default_worker_name
from django_qless.core.workers.channels import (
    ABORT_EVENTS,
    HeardAborts,
    WorkerChannelListener,
)
from django_qless.core.workers.hand import release_job
from django_qless.core.workers.heartbeat import Beat
from django_qless.core.workers.loop import JobLoop
from django_qless.core.workers.runner import (
    Outcome,
    WorkerHooks,
    fail_job,
    log_job,
    stopped_failure,
)
from django_qless.core.workers.shards import followed_shards
from django_qless.core.workers.shutdown import ExitCode, SignalState

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["SerialWorker"]

log = logging.getLogger("django_qless.worker")


class SerialWorker(JobLoop):
    """Run jobs one at a time in the calling process."""

    hard_limit_in_thread = True

    def __init__(self, config: WorkerConfig, hooks: WorkerHooks | None = None, *,
                 install_signals: bool = True) -> None:
        name = config.name or default_worker_name()
        super().__init__(
            config, hooks or WorkerHooks(), name, SignalState(term_grace=config.term_grace),
            resume=config.resume, max_jobs=config.max_jobs, reaper=config.make_reaper(name),
        )
        self.install_signals = install_signals
        # One listener thread hears `w:<worker>` in every shard served (a job's events come
        # on its own shard's channel), following the queues to the shards they move to.
        follow = followed_shards(self.client, config.queues, config.queue_refresh,
                                 holders=lambda: (name,))
        self.listener = WorkerChannelListener(name, follow, self._on_channel_event,
                                              on_reconnect=self._recheck_current)
        self.beat = Beat(name, config.beat, self.signals, self.request_stop)
        if self.reaper is not None:
            self.reaper.beat = self.beat
        self.unreleased = 0
        self.heard = HeardAborts()  # (written by the listener thread, read at a job's start)

    def request_stop(self, graceful: bool = True) -> None:
        """Stop from another thread: graceful finishes the running job, else aborts it."""
        self.signals.request_stop(graceful)
        if not graceful:
            self.guard.abort("shutdown")

    def pause(self) -> None:
        """Stop taking jobs (from another thread)."""
        self.signals.paused = True
        self.signals.wake_pipe.wake()

    def unpause(self) -> None:
        """Resume taking jobs."""
        self.signals.paused = False
        self.signals.wake_pipe.wake()

    def run_forever(self) -> int:
        """Serve jobs until stopped; return the exit code."""
        if self.install_signals:
            self.arm_signals(self._on_signal)
        self.listener.listen()
        if self.reaper is not None:
            self.reaper.reap(beat_only=True)
        health = None
        if self.config.health_file:  # (the probe module is loaded only when asked for)
            from django_qless.core.probe import start_beat

            health = start_beat(self.config.health_file, self.name, self.signals)
        try:
            self.run()
        finally:
            if health is not None:
                health.stop()
            self.listener.stop()
            if self.install_signals:
                self.disarm_signals()
            self.signals.wake_pipe.close()
            if self.reaper is not None:
                self.reaper.close()
            self.client.close()
        return ExitCode.UNRELEASED if self.unreleased else ExitCode.OK

    def _on_signal(self, signum: int) -> None:
        """Runs in the main thread, inside the job if one runs: raise into it if needed."""
        if signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            if self.signals.stop_requests:
                self.guard.abort("shutdown", same_thread=True)
            elif self.current is not None:
                log.info("TERM: taking no new job; letting the running one finish for up to "
                         "%gs", self.config.term_grace)
        elif signum == signal.SIGUSR1:
            self.signals.kill_current = False
            self.guard.abort("killed", same_thread=True)
        elif signum == signal.SIGUSR2:
            log.warning("USR2: paused; send CONT to resume")

    def _on_channel_event(self, worker: str, payload: dict[str, Any]) -> None:
        """Listener thread: obey a console request; abort the job an abort event names."""
        event, jid = payload.get("event"), payload.get("jid")
        if event in REQUESTS:
            self.beat.obey(str(event))
        elif event in ABORT_EVENTS and isinstance(jid, str):
            current = self.current
            if current is not None and jid == current.jid and self.guard.abort("lock_lost"):
                log_job(logging.WARNING, current, "job %s: %s event, aborting it (it was "
                        "taken away from this worker)", jid, event)
            else:  # not running yet: its start asks Redis whether it is still ours
                self.heard.note(jid)

    def _pre_abort(self) -> str | None:
        current = self.current
        if current is not None and self.heard.heard(current.jid) and self._taken(current):
            log_job(logging.WARNING, current, "job %s was taken away before it started; "
                    "not running it", current.jid)
            return "lock_lost"
        return super()._pre_abort()

    def _recheck_current(self) -> None:
        """Listener thread, after a pubsub gap: abort the job if it was taken meanwhile."""
        current = self.current
        # (settled by us, or over already, another job may run now: not the one checked)
        if current is not None and self._taken(current) and self.current is current:
            log_job(logging.WARNING, current, "job %s was taken away while the listener was "
                    "reconnecting; stopping it", current.jid)
            self.guard.abort("lock_lost")

    def _taken(self, job: Job) -> bool:
        """Tell whether Redis no longer gives `job` to this worker's attempt (nor settled it)."""
        try:
            return not job.client.workers.still_hold([(job.jid, self.name,
                                                       job.attempt_token)])[0]
        except QlessError as exc:
            log.warning("job %s: could not check it in Redis (%s)", job.jid, exc)
            return False  # (its heartbeat will tell)

    def on_aborted(self, job: Job, reason: str) -> bool:
        if reason == "shutdown":
            try:
                release_job(job.client, job.jid, self.name)
            except QlessError as exc:
                log.error("job %s: could not release (%s); its lease will expire", job.jid, exc)
                self.unreleased += 1
            return True
        if reason in ("timeout", "killed"):
            group, message = stopped_failure(reason, self.limits.hard)
            outcome = fail_job(job, group, f"{message} on worker {self.name}")
            if outcome is Outcome.FAILED:
                self.failed += 1
        return False
