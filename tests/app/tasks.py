"""django.tasks tasks for the QlessBackend tests."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import TaskContext, task
except ImportError:
    from django_tasks import TaskContext, task


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
