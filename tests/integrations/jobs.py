"""Jobs for the integration tests; a worker started with `--import tests.integrations.jobs`
also sets up Sentry (TEST_SENTRY_OUT) and OpenTelemetry (TEST_OTEL_OUT) from the environment,
as an application's own start-up module would (`support.setup_from_environment`)."""

from __future__ import annotations

import logging
import time

from django_qless.core.job import Job
from django_qless.core.registry import register
from tests.integrations.support import setup_from_environment

__all__ = ["boom", "flaky", "ok", "slow"]

log = logging.getLogger("tests.integrations.jobs")


@register()
def ok(job: Job) -> None:
    """Log a line and succeed."""
    log.info("ok job %s ran", job.jid)


@register()
def boom(job: Job) -> None:
    """Log a warning and raise."""
    log.warning("about to fail job %s", job.jid)
    raise ValueError(f"boom {job.data.get('n')}")


@register()
def flaky(job: Job) -> None:
    """Fail every attempt: retry at once while retries are left, then fail for good."""
    try:
        raise ValueError(f"flaky attempt {job.original_retries - job.retries + 1}")
    except ValueError as exc:
        job.retry(0, "tests.ValueError", str(exc))
        raise RuntimeError("retry scheduled") from exc



@register()
def slow(job: Job) -> None:
    """Run far past any time limit a test sets (in short sleeps, so an abort lands)."""
    log.info("slow job %s started", job.jid)
    for _ in range(600):
        time.sleep(0.05)


setup_from_environment()
