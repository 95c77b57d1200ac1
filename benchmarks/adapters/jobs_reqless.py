"""The no-op job run by reqless's worker."""

import json

from _jobbody import record

__all__ = ["NoOp"]


class NoOp:
    """Record the run and complete the job, as a reqless job method must."""

    @staticmethod
    def process(job):  # type: ignore[no-untyped-def]
        """Record the job body's start, then complete."""
        record(float(json.loads(job.data).get("t0", 0.0)))  # reqless hands data as JSON text
        job.complete()
