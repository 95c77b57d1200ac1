"""Job kinds with their own time limits (imported by workers with
`--import tests.worker.limited_jobs`); each records what it saw in the ledger."""

from __future__ import annotations

import time
from datetime import timedelta

from django_qless.core.exceptions import SoftTimeLimitExceeded
from django_qless.core.job import Job
from django_qless.core.registry import register
from tests.worker.jobs import note

__all__: list[str] = []


def _sleep(seconds: float) -> None:
    """Sleep in small steps, so an exception raised into the job lands promptly."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.01)


@register(timeout=1)
def hard_one(job: Job) -> None:
    """Run far past its own 1 s limit."""
    note(job, "started")
    _sleep(30)
    note(job, "done")


@register(soft_timeout=timedelta(seconds=1))
def tidy(job: Job) -> None:
    """Catch the soft limit's exception, clean up and return (the job completes)."""
    note(job, "started")
    try:
        _sleep(30)
    except SoftTimeLimitExceeded as exc:
        note(job, "soft", message=str(exc))
        job.data["cleaned"] = True
        return
    note(job, "done")


@register(timeout=3, soft_timeout=1)
def stubborn(job: Job) -> None:
    """Catch the soft limit's exception and carry on until the hard limit stops it."""
    note(job, "started")
    try:
        _sleep(30)
    except SoftTimeLimitExceeded:
        note(job, "soft")
    _sleep(30)
    note(job, "done")


@register(soft_timeout=1)
def careless(job: Job) -> None:
    """Let the soft limit's exception out (the job fails for its time limit)."""
    note(job, "started")
    _sleep(30)


@register(soft_timeout=2)
def quick(job: Job) -> None:
    """Finish well within its soft limit."""
    note(job, "done")
