"""What the worker logs about a job, and the job a log record was emitted in.

Every record the worker writes about one job carries `jid`, `klass`, `queue`, `attempt` and
`worker` as `extra` fields (a JSON formatter shows them). While a job runs, `current_job`
names it; `JobContextFilter` copies the same fields onto any record, so the job's own log
lines carry its jid too: add the filter to your handlers.

Levels: a job that fails (or exhausts its retries) is an ERROR with its traceback; a retry
is a WARNING saying when the job runs again; a lost lease, a time limit and a refused
completion are WARNINGs or ERRORs; completions are INFO (shown with -v).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["FIELDS", "JobContextFilter", "child_extra", "current_job", "job_extra", "log_job",
           "log_raised"]

log = logging.getLogger("django_qless.worker")

#: The job running in this context (set by the worker around the job's code).
current_job: ContextVar[Job | None] = ContextVar("django_qless_current_job", default=None)

FIELDS = ("jid", "klass", "queue", "attempt", "worker")


def job_extra(job: Job) -> dict[str, Any]:
    """Return the `extra` fields that name `job` on a log record."""
    try:
        attempt = max(1, job.original_retries - job.retries + 1)
    except (AttributeError, TypeError, ValueError):
        attempt = None
    return {"jid": job.jid, "klass": getattr(job, "klass_name", None),
            "queue": getattr(job, "queue_name", None), "attempt": attempt,
            "worker": getattr(job, "worker_name", None)}


def child_extra(child: Any) -> dict[str, Any]:
    """Return the `extra` fields of the job a forked child runs (the supervisor's view)."""
    return {"jid": child.jid, "klass": child.klass, "queue": child.queue, "attempt": None,
            "worker": child.name}


class JobContextFilter(logging.Filter):
    """Add the running job's fields to every record (None outside a job); never drops one."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Fill in `jid`, `klass`, `queue`, `attempt` and `worker` where they are missing."""
        if hasattr(record, "jid"):
            return True  # the worker named the job itself
        job = current_job.get()
        values = job_extra(job) if job is not None else dict.fromkeys(FIELDS)
        for name, value in values.items():
            setattr(record, name, value)
        return True


def log_raised(job: Job, exc: BaseException, group: str) -> None:
    """Log a job that raised: ERROR when it fails, WARNING when it will be retried.

    Called once the job's state is settled: still running (the worker fails it next),
    failed, or put back by a retry (waiting, or scheduled for later). An exception with a
    true `logged` attribute says its retry was logged already.
    """
    state = job.state
    if state in ("waiting", "scheduled") and getattr(exc, "logged", False):
        return  # a retry policy that logged the retry itself (the exception says so)
    extra = job_extra(job)
    if state in ("waiting", "scheduled") or (state == "failed" and _retries(job) < 0):
        extra["attempt"] = max(1, (extra["attempt"] or 2) - 1)  # (the retry counted it)
    if state in ("waiting", "scheduled"):
        when = "now" if state == "waiting" else "after its back-off"
        log.warning("job %s (%s) raised %s: %s; retried, runs again %s (%s)", job.jid,
                    job.klass_name, group, _message(exc), when, _retries_left(job),
                    extra=extra)
    elif state in ("running", "failed"):
        spent = state == "failed" or (_retries(job) <= 0 < _original_retries(job))
        why = "failed, no retries left" if spent else "failed"
        log.error("job %s (%s) %s: %s: %s", job.jid, job.klass_name, why, group,
                  _message(exc), exc_info=(type(exc), exc, exc.__traceback__), extra=extra)
    else:  # it completed or moved itself, then raised
        log.warning("job %s (%s) settled itself (%s), then raised %s: %s", job.jid,
                    job.klass_name, state, group, _message(exc), extra=extra)


def log_job(level: int, job: Job, message: str, *args: Any) -> None:
    """Log `message` about `job` at `level` with the job's fields as extra."""
    if log.isEnabledFor(level):
        log.log(level, message, *args, extra=job_extra(job))


def _retries(job: Job) -> int:
    try:
        return int(job.retries)
    except (AttributeError, TypeError, ValueError):
        return 0


def _original_retries(job: Job) -> int:
    try:
        return int(job.original_retries)
    except (AttributeError, TypeError, ValueError):
        return 0


def _message(exc: BaseException) -> str:
    """Return the exception's text and, for a wrapper (a retry), its cause's."""
    text = str(exc) or type(exc).__name__
    cause = exc.__cause__
    if cause is not None and str(cause):
        text = f"{text}: {cause}"
    return text[:2000]


def _retries_left(job: Job) -> str:
    left = _retries(job)
    return f"{left} retr{'y' if left == 1 else 'ies'} left"
