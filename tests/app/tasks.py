"""django.tasks tasks for the QlessBackend tests."""

from __future__ import annotations

import json
import os
import time
from typing import Any

try:
    from django.tasks import TaskContext, task
    from django.tasks.signals import task_finished, task_started
except ImportError:
    from django_tasks import TaskContext, task
    from django_tasks.signals import task_finished, task_started


@task
def multiply(a: int, b: int) -> int:
    """Return a * b."""
    return a * b


@task(priority=50, queue_name="tasks")
def urgent(label: str) -> str:
    """A prioritised task on another queue."""
    return label.upper()


@task(takes_context=True)
def with_context(context: TaskContext, value: int) -> dict[str, Any]:
    """Return what the context says."""
    return {"id": context.task_result.id, "attempt": context.attempt, "value": value}


@task
async def async_double(value: int) -> int:
    """An async task."""
    return value * 2


@task
def explode() -> None:
    """Always fail."""
    raise KeyError("nope")


@task
def kinds(when: Any, amount: Any) -> list[str]:
    """Return what the arguments became (as ``tests.app.jobs.kinds`` does)."""
    return [type(when).__name__, type(amount).__name__, str(when), str(amount)]


@task
def sleepy(seconds: float) -> float:
    """Sleep (a task a worker can be stopped in the middle of)."""
    time.sleep(seconds)
    return seconds


def _record(sender: Any, task_result: Any, **kwargs: Any) -> None:
    """Append the task's status to $QLESS_TEST_SIGNAL_LOG (worker-side signal tests)."""
    path = os.environ.get("QLESS_TEST_SIGNAL_LOG")
    if path:
        with open(path, "a") as fh:
            fh.write(json.dumps({"id": task_result.id, "status": str(task_result.status)}) + "\n")


task_started.connect(_record, dispatch_uid="tests.task_started")
task_finished.connect(_record, dispatch_uid="tests.task_finished")
