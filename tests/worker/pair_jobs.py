"""Job targets of tests/worker/test_pairs.py (the worker imports this module; it brings
tests.worker.jobs along)."""

from __future__ import annotations

import time

from django_qless.core.job import Job
from django_qless.core.registry import register
from tests.worker.jobs import note

__all__: list[str] = []


@register()
def quick(job: Job) -> None:
    """Finish at once (short: its completion may be kept for the next job's call)."""


@register()
def look(job: Job) -> None:
    """Run long (0.6 s), then record the states of the jobs named in data['jids']."""
    time.sleep(0.6)
    states = {jid: job.client.jobs[jid].state for jid in job.data["jids"]}
    note(job, "looked", states=states)


@register()
def peek(job: Job) -> None:
    """Record at once (a short job) the states of the jobs named in data['jids']."""
    states = {jid: job.client.jobs[jid].state for jid in job.data["jids"]}
    note(job, "peeked", states=states)
