"""Completions refused for good: the job is failed at once, saying why.

A job that returns with data the engine cannot store (over 1 MiB, not JSON) can never be
completed. Treating that refusal like a lost lock would leave the job running until its lease
expired and then run it again, until its retries ran out, with the reason only in the worker's
log. So a completion refused for a reason other than a lost lock or a transport error fails
the job straight away, with the data it was popped with (or last heartbeated), in failure group
`django_qless.CompleteRefused` and a message naming the reason.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from django_qless.core.exceptions import (
    InvalidArgument,
    QlessError,
    ScriptError,
)
from django_qless.core.workers.joblog import log_job
from django_qless.core.workers.runner import Outcome, fail_refused_outcome

if TYPE_CHECKING:
    from django_qless.core.job import Job

__all__ = ["COMPLETE_REFUSED_GROUP", "fail_refused", "refused_for_good"]

log = logging.getLogger("django_qless.worker")

COMPLETE_REFUSED_GROUP = "django_qless.CompleteRefused"

# Error replies that say nothing about the call itself: out of memory, missing permissions.
# Failing the job would be refused the same way (or wrongly spend it on a transient state).
_TRANSIENT_PREFIXES = ("OOM ", "NOPERM ")


def refused_for_good(exc: QlessError) -> bool:
    """Tell whether a completion error means the call can never succeed as sent."""
    if isinstance(exc, InvalidArgument):  # bad data, caught client-side or by the engine
        return True
    return isinstance(exc, ScriptError) and not str(exc).startswith(_TRANSIENT_PREFIXES)


def fail_refused(job: Job, exc: QlessError) -> Outcome:
    """Fail `job` because its completion was refused with `exc`; LOST if that is refused too."""
    log_job(logging.ERROR, job, "job %s: completion refused, failing the job: %s", job.jid,
            exc)
    # The changes are what was refused: fail with the data as stored, which the engine took.
    job._drop_data_changes()
    message = (
        f"The worker could not complete this {job.klass_name} job: {exc}\n"
        f"The job's changes to its data were not saved.\nworker: {job.worker_name}"
    )
    try:
        job.fail(COMPLETE_REFUSED_GROUP, message)
    except QlessError as again:
        return fail_refused_outcome(job, again)
    return Outcome.FAILED
