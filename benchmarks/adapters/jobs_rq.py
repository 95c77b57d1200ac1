"""The no-op job run by rq's SimpleWorker."""

from _jobbody import record

__all__ = ["noop"]


def noop(i: int, t0: float = 0.0) -> None:
    """Record the job body's start."""
    record(t0)
