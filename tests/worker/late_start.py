"""Make a child report some jobs' start late (imported by a worker with `--import`).

A job whose data has `late` notes `popped` in the ledger, is canceled, and its start is
reported 0.3 s later: the supervisor learns of the job only after the cancel, whose event
named a job no child had reported yet.
"""

from __future__ import annotations

import time
from typing import Any

from django_qless.core.workers.child import ForkChild
from tests.worker.jobs import note

_report_start = ForkChild.on_job_start


def _late_start(self: ForkChild, job: Any) -> None:
    if job.data.get("late"):
        note(job, "popped")
        job.cancel()
        time.sleep(0.3)
    _report_start(self, job)


ForkChild.on_job_start = _late_start  # type: ignore[method-assign]
