"""Jobs for the integration tests; a worker started with `--import tests.integrations.jobs`
also sets up Sentry (TEST_SENTRY_OUT) and OpenTelemetry (TEST_OTEL_OUT) from the environment,
as an application's own start-up module would."""

from __future__ import annotations

import logging
import os

from django_qless.core.job import Job
from django_qless.core.registry import register

__all__ = ["boom", "flaky", "ok"]

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


def _setup_from_environment() -> None:
    """Initialise Sentry and/or OpenTelemetry for a worker subprocess."""
    sentry_out = os.environ.get("TEST_SENTRY_OUT")
    if sentry_out:
        import sentry_sdk

        from django_qless.core.integrations.sentry import QlessIntegration
        from tests.integrations.support import DSN, MemoryTransport

        sentry_sdk.init(dsn=DSN, transport=MemoryTransport(sentry_out), traces_sample_rate=1.0,
                        auto_enabling_integrations=False, integrations=[QlessIntegration()])
    otel_out = os.environ.get("TEST_OTEL_OUT")
    if otel_out:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from django_qless.core.integrations.otel import QlessInstrumentor
        from tests.integrations.support import JsonLinesSpanExporter

        provider = TracerProvider()
        # Batched: the spans leave only when the worker flushes the provider.
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(otel_out),
                                                       schedule_delay_millis=60_000))
        trace.set_tracer_provider(provider)
        QlessInstrumentor().instrument()


_setup_from_environment()
