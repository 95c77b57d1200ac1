"""Running a ``@job`` function in a worker: the call, the retry policy, the return value."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from django_qless.options import RESULT_KEY, to_json

if TYPE_CHECKING:
    from django_qless.decorators import JobFunction

__all__ = ["RetryScheduled", "perform_function", "store_result"]

log = logging.getLogger("django_qless")


class RetryScheduled(Exception):  # noqa: N818 - an outcome, not an error
    """The job raised a retryable exception and was put back with a delay."""


def perform_function(target: JobFunction[Any, Any], job: Any) -> Any:
    """Run a function job for a worker; see ``JobFunction.process``."""
    data = job.data if isinstance(job.data, dict) else {}
    try:
        value = target.call_with(data)
    except Exception as exc:
        policy = target.options.retry
        if policy is None or not policy.matches(exc) or job.retries <= 0:
            raise
        attempt = max(1, job.original_retries - job.retries + 1)
        delay = policy.backoff.delay(attempt)
        group = f"{type(exc).__module__}.{type(exc).__qualname__}"
        priority = policy.priority_for(job.priority, attempt)
        job.retry(delay, group, f"{exc}"[:4000] or group, priority=priority)
        log.info("job %s retried in %.1fs after %s (attempt %d)", job.jid, delay, group, attempt)
        raise RetryScheduled(f"retry in {delay:.1f}s after {group}") from exc
    store_result(job, value)
    return value


def store_result(job: Any, value: Any) -> None:
    """Keep the return value in the job data (saved by complete) if it is JSON."""
    try:
        encoded = to_json(value, f"return value of {job.klass_name}")
    except TypeError:
        log.warning("job %s returned a non-JSON value; it is not stored", job.jid)
        return
    if isinstance(job.data, dict):
        job.data[RESULT_KEY] = encoded
