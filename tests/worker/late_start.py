"""Make a worker start some jobs late (imported by a worker with `--import`).

A job whose data has `late` notes `popped` in the ledger, is canceled, and starts 0.3 s
later: in a forking worker the child reports its start only then, so the supervisor learns
of the job after the cancel, whose event named a job no child had reported yet; in a serial
worker the event arrives before the job entered job code.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django_qless.core.workers.child import ForkChild
from django_qless.core.workers.loop import JobLoop
from django_qless.core.workers.serial import SerialWorker
from tests.worker.jobs import note


def _late(start: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    def late_start(self: JobLoop, job: Any) -> None:
        if job.data.get("late"):
            note(job, "popped")
            job.cancel()
            time.sleep(0.3)
        start(self, job)

    return late_start


ForkChild.on_job_start = _late(ForkChild.on_job_start)  # type: ignore[method-assign]
SerialWorker.on_job_start = _late(SerialWorker.on_job_start)  # type: ignore[method-assign]
