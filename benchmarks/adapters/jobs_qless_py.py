"""The no-op job run by qless-py's worker (and reqless's: same job-class protocol)."""

from _jobbody import record

__all__ = ["NoOp"]


class NoOp:
    """Record the run and complete the job, as a qless job method must."""

    @staticmethod
    def process(job):  # type: ignore[no-untyped-def]
        """Record the job body's start, then complete."""
        record(float(job.data.get("t0", 0.0)))
        job.complete()
