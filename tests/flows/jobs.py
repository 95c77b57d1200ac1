"""Jobs the flow tests chain together (the worker imports them through JOB_MODULES)."""

from __future__ import annotations

import os
from typing import Any

from django_qless import job
from django_qless.core.flows import received


@job(queue="flows")
def add(a: int, b: int = 0) -> int:
    return a + b


@job(queue="flows")
def times(value: int, factor: int) -> int:
    return value * factor


@job(queue="sums")
def total(values: list[int]) -> int:
    return sum(values)


@job(queue="flows")
def constant(value: Any) -> Any:
    return value


@job(queue="flows")
def fails_once(value: int, marker: str) -> int:
    """Fail the first time (leaving `marker` behind), succeed when run again."""
    if not os.path.exists(marker):
        with open(marker, "w") as fh:
            fh.write("failed once")
        raise RuntimeError("first attempt fails")
    return value


@job(queue="flows")
class Collect:
    """A class step: reads what it follows through the core and stores it."""

    @staticmethod
    def process(job: Any) -> None:
        job.data["result"] = {"got": received(job), "label": job.data.get("label")}
