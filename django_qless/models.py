"""An unmanaged model that only carries the dashboard's permissions (no table)."""

from __future__ import annotations

from django.db import models

__all__ = ["Dashboard"]


class Dashboard(models.Model):
    """Anchor the queue dashboard in the admin and in the permission system."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = (
            ("view_dashboard", "Can view the qless dashboard"),
            ("manage_jobs", "Can act on qless queues, jobs, workers and config"),
        )
        verbose_name = "queue dashboard"
        verbose_name_plural = "queue dashboard"

    def __str__(self) -> str:
        return "qless dashboard"
