"""What the integrations report about a job attempt: its number, its name, how it ended."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_qless.core.exceptions import SoftTimeLimitExceeded
from django_qless.core.integrations import TRACE_KEY

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = [
    "FINAL_FAILURES", "SENSITIVE_WORDS", "Attempt", "outcome_of", "reported_error",
    "scrubbed_data",
]

# The klass of jobs that run a django.tasks task; their data names the task (task_path).
_TASK_KLASS = "django_qless.tasks_backend.DjangoTaskJob"
# Data keys containing one of these (any case) have their values replaced.
SENSITIVE_WORDS = (
    "password", "passwd", "pwd", "secret", "token", "authorization", "api_key", "apikey", "key",
    "credential", "session", "cookie", "csrf", "private", "signature", "dsn",
)
_FILTERED = "[Filtered]"


@dataclass(frozen=True)
class Attempt:
    """One run of a job: what the integrations tag it with."""

    jid: str
    queue: str
    klass: str
    name: str  # the task path for a django.tasks task, else the klass
    attempt: int  # 1 for the first run
    retries_left: int
    retries: int
    worker: str

    @classmethod
    def of(cls, job: Job) -> Attempt:
        """Read the attempt a worker is about to run (before the job can change itself)."""
        name = job.klass_name
        data = job.data
        if name == _TASK_KLASS and isinstance(data, dict):
            task_path = data.get("task_path")
            if isinstance(task_path, str) and task_path:
                name = task_path
        left = max(0, job.retries)
        total = max(left, job.original_retries)
        return cls(jid=job.jid, queue=job.queue_name, klass=job.klass_name, name=name,
                   attempt=total - left + 1, retries_left=left, retries=total,
                   worker=job.worker_name or "")


# Outcomes after which the job is failed for good (until someone retries it).
FINAL_FAILURES = frozenset({"failed", "timed_out", "killed"})
# The worker's abort reasons (the message of the BaseException it raises into the job)
# after which it fails the job rather than giving it back.
_FAILING_ABORTS = {"timeout": "timed_out", "killed": "killed"}


def outcome_of(job: Job, error: BaseException | None) -> str:
    """Say how an attempt ended: completed, retried, failed, timed_out, killed or aborted.

    An `Exception` from a job still running means the worker fails it now (qless keeps a
    failed job until someone retries it: the final failure). A job that retried itself
    before raising waits for its next attempt. The worker stops a job by raising a
    BaseException into it: at its time limit (timed_out) or on USR1 (killed) the job is
    then failed; on shutdown or a lost lease (aborted) it is given back, not failed.
    """
    if error is None:
        return "completed"
    if not isinstance(error, Exception):
        return _FAILING_ABORTS.get(str(error), "aborted")
    state = job.state
    if state in ("running", "failed"):
        # A soft limit's exception let out fails the job for its time limit.
        return "timed_out" if isinstance(error, SoftTimeLimitExceeded) else "failed"
    if state == "complete":
        return "completed"
    return "retried"


def reported_error(job: Job, error: BaseException) -> BaseException:
    """Return the exception worth reporting for an attempt that raised `error`.

    A job that settled itself (retried or failed) and then raised to say so, `raise
    RetryScheduled(...) from exc` style, is reported with the cause it names.
    """
    if job.state != "running" and error.__cause__ is not None:
        return error.__cause__
    return error


def _scrub(value: Any, depth: int = 0) -> Any:
    """Return `value` with the values of sensitive-looking keys replaced, at any depth."""
    if depth > 10:
        return "..."
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            lowered = name.lower()
            if any(word in lowered for word in SENSITIVE_WORDS):
                out[name] = _FILTERED
            else:
                out[name] = _scrub(item, depth + 1)
        return out
    if isinstance(value, (list, tuple)):
        return [_scrub(item, depth + 1) for item in value]
    return value


def scrubbed_data(data: Any, limit: int) -> Any:
    """Return the job's data for a report: sensitive keys filtered, at most `limit` bytes.

    Data over the limit is given as the start of its JSON text, marked as cut.
    """
    if isinstance(data, Mapping):
        data = {k: v for k, v in data.items() if k != TRACE_KEY}
    clean = _scrub(data)
    try:
        text = json.dumps(clean, default=repr, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(clean)
    if len(text.encode("utf-8")) <= limit:
        return clean
    cut = text.encode("utf-8")[: max(0, limit)].decode("utf-8", "ignore")
    return {"truncated": True, "bytes": len(text.encode("utf-8")), "json_start": cut}
