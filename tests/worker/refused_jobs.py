"""Jobs whose completion can never be accepted (imported by workers with `--import`)."""

from __future__ import annotations

import time

from django_qless.core.job import Job
from django_qless.core.registry import register
from tests.worker.jobs import note

__all__: list[str] = []


@register()
def grow(job: Job) -> None:
    """Grow the data past the 1 MiB limit and return."""
    note(job, "started")
    job.data["blob"] = "x" * (1024 * 1024)


@register()
def setty(job: Job) -> None:
    """Put a Python set (not JSON) in the data and return."""
    note(job, "started")
    job.data["seen"] = {1, 2}


@register()
def garbled(job: Job) -> None:
    """Leave data text that passes no client check but the engine refuses (not JSON)."""
    note(job, "started")
    job._raw = '{"half": '


@register()
def setty_then_raise(job: Job) -> None:
    """Put a set in the data, then raise: the failure itself must still be recorded."""
    note(job, "started")
    job.data["seen"] = {1}
    raise ValueError("gave up")


@register()
def stolen(job: Job) -> None:
    """Have the job's lock pass to another worker behind this one's back, then return."""
    note(job, "started")
    job.client.redis.hset(f"ql:j:{job.jid}", "worker", "someone-else")


@register()
def setty_long(job: Job) -> None:
    """Put a set in the data, then run for several lease lifetimes and return."""
    note(job, "started")
    job.data["seen"] = {1}
    time.sleep(float(job.data["seconds"]))
