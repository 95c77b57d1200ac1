"""The demo's jobs: thumbnails -> report -> e-mail, a recurring cleanup, a failing upload."""

from __future__ import annotations

import logging
import random
import time
from datetime import timedelta

from django.utils import timezone

from django_qless import job
from django_qless.options import Backoff

log = logging.getLogger("demo")


@job(queue="images", tags=["thumbnail"])
def make_thumbnail(report_id: int, index: int, size: int = 128) -> dict[str, int]:
    """Pretend to resize image `index` of a report."""
    time.sleep(random.uniform(0.2, 1.0))
    return {"report": report_id, "index": index, "size": size}


@job(queue="reports", priority=5, tags=["report"])
def build_report(report_id: int) -> str:
    """Assemble the report once its thumbnails exist."""
    from demo.models import Report

    report = Report.objects.get(pk=report_id)
    time.sleep(0.5)
    report.status = "built"
    report.summary = f"{report.images} thumbnails, built {timezone.now():%H:%M:%S}"
    report.save(update_fields=["status", "summary"])
    return report.summary


@job(queue="emails", tags=["mail"])
def email_report(report_id: int, to: str = "boss@example.com") -> str:
    """Send the report (the last step; the job is tracked)."""
    from demo.models import Report

    Report.objects.filter(pk=report_id).update(status="sent", finished=timezone.now())
    return f"report {report_id} sent to {to}"


@job(queue="default", tags=["maintenance"])
def cleanup_old_reports(days: int = 7) -> int:
    """Delete old reports (runs as a recurring job)."""
    from demo.models import Report

    deleted, _ = Report.objects.filter(created__lt=timezone.now() - timedelta(days=days)).delete()
    return deleted


@job(queue="default", retries=2, retry_on=[ConnectionError], backoff=Backoff.fixed(5))
def flaky_upload(name: str) -> None:
    """Always fail: retried twice with a 5 s backoff, then shows up under Failed."""
    raise ConnectionError(f"upload of {name!r} refused by the (imaginary) server")


@job(queue="default")
def smoke(value: int) -> int:
    """The job scripts/demo.py --smoke runs to completion."""
    return value * 2
