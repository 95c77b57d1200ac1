"""The no-op job run by django-qless's core worker (registered, so the worker may run it)."""

from __future__ import annotations

from typing import Any

from _jobbody import record

from django_qless.core.registry import register

__all__ = ["noop"]


@register("bench.noop")
def noop(job: Any) -> None:
    """Record the job body's start; the worker completes it (with its next reserve)."""
    record(float(job.data.get("t0", 0.0)))
