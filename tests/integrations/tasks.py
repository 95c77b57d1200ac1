"""django.tasks tasks and @job jobs for the integration tests."""

from __future__ import annotations

import logging

from django_qless import job

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task

log = logging.getLogger("tests.integrations.tasks")


@task
def charge(order: int) -> None:
    """Log a line, then fail."""
    log.warning("charging order %s", order)
    raise ValueError(f"card declined for order {order}")


@job(queue="obs")
def ship(order: int) -> int:
    """Return the order number."""
    return order
