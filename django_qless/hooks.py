"""The Django side of the worker: database connections around forks and jobs, signals.

Signals are sent with ``sender`` = the alias the worker serves; job signals carry one
``JobEvent`` (``event=``), which names the worker.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import close_old_connections, connections

from django_qless import signals
from django_qless.conf import DEFAULT_ALIAS
from django_qless.core.workers import Outcome, WorkerHooks, WorkerInfo

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["DjangoWorkerHooks", "outcome_of"]

log = logging.getLogger("django_qless.worker")


def outcome_of(error: BaseException | None) -> str:
    """Name what happened to a job: completed, retried, failed or aborted."""
    if error is None:
        return Outcome.COMPLETED.value
    from django_qless.running import RetryScheduled

    if isinstance(error, RetryScheduled):
        return "retried"
    # JobAborted (lock lost, canceled, shutdown, time limit) is a BaseException.
    return Outcome.FAILED.value if isinstance(error, Exception) else Outcome.ABORTED.value


class DjangoWorkerHooks(WorkerHooks):
    """Close DB connections before every fork and around every job; send worker signals."""

    def __init__(self, alias: str = DEFAULT_ALIAS) -> None:
        self.alias = alias

    def on_worker_start(self, worker: WorkerInfo) -> None:
        """Send ``worker_started`` in the process that takes jobs."""
        signals.worker_started.send_robust(sender=self.alias, worker=worker)

    def on_worker_stop(self, worker: WorkerInfo) -> None:
        """Send ``worker_stopped`` and close this process's DB connections."""
        try:
            signals.worker_stopped.send_robust(sender=self.alias, worker=worker)
        finally:
            connections.close_all()

    def before_fork(self) -> None:
        """Close every DB connection: a socket shared with a child breaks TLS sessions."""
        connections.close_all()

    def after_fork_child(self) -> None:
        """Forget the parent's qless clients (the child builds its own)."""
        from django_qless.clients import clients

        clients.reset()

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        """Drop stale DB connections before and after the job; send job signals."""
        close_old_connections()
        # The payload is built only when a receiver is connected: most workers have none.
        if signals.job_started.receivers:
            signals.job_started.send_robust(
                sender=self.alias, event=signals.JobEvent.from_job("started", job, self.alias))
        error: BaseException | None = None
        try:
            return call_next()
        except BaseException as exc:
            error = exc
            raise
        finally:
            try:
                if signals.job_finished.receivers:
                    event = signals.JobEvent.from_job("finished", job, self.alias,
                                                      outcome=outcome_of(error), error=error)
                    signals.job_finished.send_robust(sender=self.alias, event=event)
            finally:
                close_old_connections()
