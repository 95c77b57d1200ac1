"""A report whose pipeline (thumbnails -> report -> e-mail) runs as qless jobs."""

from django.db import models


class Report(models.Model):
    """A report built from a few images."""

    title = models.CharField(max_length=200)
    images = models.PositiveIntegerField(default=3)
    status = models.CharField(max_length=20, default="queued")
    summary = models.TextField(blank=True)
    created = models.DateTimeField(auto_now_add=True)
    finished = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"{self.title} ({self.status})"
