"""django.tasks tasks for the integration tests."""

from __future__ import annotations

import logging

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
