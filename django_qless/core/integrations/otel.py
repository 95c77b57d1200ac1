"""OpenTelemetry tracing for qless jobs: `QlessInstrumentor().instrument()`.

Needs only `opentelemetry-api` (the `django-qless[otel]` extra); the application brings the
SDK and its exporters. Once instrumented, in this process:

- each `Queue.put` runs in a PRODUCER span `send <queue>` and the W3C trace context of
  that span (`traceparent`, `tracestate`, `baggage`, written by the global propagator)
  travels with the job in its data (see `TRACE_KEY`);
- each job a worker runs is a CONSUMER span `process <queue>`, a child of (and linked to)
  the producer span, so a request, its enqueue and the job's run form one trace;
- an attempt that raises records the exception and sets the span's status to ERROR; a
  retried attempt adds a `qless.job.retry` event; `qless.job.outcome` says how it ended.

Attributes follow OpenTelemetry's messaging conventions: `messaging.system = "qless"`,
`messaging.destination.name` (the queue), `messaging.message.id` (the jid),
`messaging.operation.name`/`.type` (`send`, `process`). Without `opentelemetry-api`
installed, `instrument()` returns False and changes nothing; this module imports
OpenTelemetry only when `instrument()` runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django_qless.core import integrations
from django_qless.core.integrations.jobinfo import Attempt, outcome_of, reported_error
from django_qless.core.workers.runner import WorkerHooks

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer, TracerProvider

    from django_qless.core.integrations import PendingPut
    from django_qless.core.job import Job
    from django_qless.core.workers.runner import WorkerInfo

__all__ = ["QlessInstrumentor"]

log = logging.getLogger("django_qless")

SYSTEM = "qless"
TRACER_NAME = "django_qless"


def _version() -> str | None:
    """Return the installed django-qless version, if known."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("django-qless")
    except PackageNotFoundError:
        return None


def _error_type(error: BaseException) -> str:
    """Return the `error.type` of an exception: its class's `module.QualName`."""
    cls = type(error)
    return f"{cls.__module__}.{cls.__qualname__}"


class QlessInstrumentor:
    """Trace puts and job runs in this process (`instrument()` / `uninstrument()`)."""

    def __init__(self) -> None:
        self._tracer: Tracer | None = None
        self._provider: TracerProvider | None = None
        self._hooks: _OtelHooks | None = None

    @property
    def is_instrumented(self) -> bool:
        """Tell whether `instrument()` is in effect."""
        return self._hooks is not None

    def instrument(self, tracer_provider: TracerProvider | None = None,
                   flush_timeout: float = 5.0, **options: Any) -> bool:
        """Start tracing; return False (and do nothing) without `opentelemetry-api`.

        `tracer_provider`: default, the global one (it may be set later). A worker's
        process flushes the provider for up to `flush_timeout` seconds when it stops taking
        jobs (a forked child leaves with `os._exit`, which runs no atexit handler). Other
        keyword arguments (those `opentelemetry-instrument` passes) are ignored.
        """
        try:
            from opentelemetry import trace
        except ImportError:
            log.debug("opentelemetry-api is not installed: qless jobs are not traced")
            return False
        if self._hooks is not None:
            return True
        self._provider = tracer_provider
        self._tracer = trace.get_tracer(TRACER_NAME, _version(), tracer_provider=tracer_provider)
        self._hooks = _OtelHooks(self._tracer, self._flush, flush_timeout)
        integrations.install_put_middleware(self._put)
        integrations.install_hooks(self._hooks)
        return True

    def uninstrument(self) -> None:
        """Stop tracing new puts and new workers (running workers keep their hooks)."""
        integrations.uninstall_put_middleware(self._put)
        if self._hooks is not None:
            integrations.uninstall_hooks(self._hooks)
        self._hooks = self._tracer = None

    def _put(self, put: PendingPut, call_next: Callable[[], str]) -> str:
        """Run a put in a PRODUCER span and send that span's context with the job."""
        tracer = self._tracer
        if tracer is None:
            return call_next()
        from opentelemetry import propagate
        from opentelemetry.trace import SpanKind

        attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": put.queue.name,
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.message.id": put.jid,
            "qless.job.klass": put.klass,
        }
        with tracer.start_as_current_span(
            f"send {put.queue.name}", kind=SpanKind.PRODUCER, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            carrier: dict[str, str] = {}
            try:
                propagate.inject(carrier)
            except Exception:  # a faulty propagator must not stop the put
                log.warning("could not write the trace context into job %s", put.jid,
                            exc_info=True)
            put.add_headers(carrier)
            try:
                return call_next()
            except BaseException as exc:
                _set_error(span, exc)
                raise

    def _flush(self, timeout: float) -> None:
        """Flush the tracer provider's span processors, if it has any."""
        provider: Any = self._provider
        if provider is None:
            from opentelemetry import trace

            provider = trace.get_tracer_provider()
        force_flush = getattr(provider, "force_flush", None)
        if callable(force_flush):
            force_flush(int(timeout * 1000))


def _set_error(span: Span, error: BaseException) -> None:
    """Record `error` on `span` and mark the span failed."""
    from opentelemetry.trace import Status, StatusCode

    span.record_exception(error)
    span.set_attribute("error.type", _error_type(error))
    span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"[:1024]))


class _OtelHooks(WorkerHooks):
    """Run each job in a CONSUMER span under the context its put sent."""

    def __init__(self, tracer: Tracer, flush: Callable[[float], None],
                 flush_timeout: float) -> None:
        self.tracer = tracer
        self.flush = flush
        self.flush_timeout = flush_timeout

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        from opentelemetry import propagate, trace
        from opentelemetry.trace import Link, SpanKind

        try:
            attempt = Attempt.of(job)
            parent = propagate.extract(integrations.trace_headers(job))
        except Exception:  # never fail a job for its trace
            return call_next()
        sent_by = trace.get_current_span(parent).get_span_context()
        links = [Link(sent_by)] if sent_by.is_valid else []
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": attempt.queue,
            "messaging.operation.name": "process",
            "messaging.operation.type": "process",
            "messaging.message.id": attempt.jid,
            "messaging.client.id": attempt.worker,
            "qless.job.klass": attempt.klass,
            "qless.job.name": attempt.name,
            "qless.job.attempt": attempt.attempt,
            "qless.job.retries_left": attempt.retries_left,
        }
        with self.tracer.start_as_current_span(
            f"process {attempt.queue}", context=parent, kind=SpanKind.CONSUMER, links=links,
            attributes=attributes, record_exception=False, set_status_on_exception=False,
        ) as span:
            try:
                result = call_next()
            except BaseException as exc:
                _record_failure(span, job, attempt, exc)
                raise
            span.set_attribute("qless.job.outcome", outcome_of(job, None))
            return result

    def on_worker_stop(self, worker: WorkerInfo) -> None:
        try:
            self.flush(self.flush_timeout)
        except Exception:
            log.warning("could not flush OpenTelemetry spans", exc_info=True)


def _record_failure(span: Span, job: Job, attempt: Attempt, error: BaseException) -> None:
    """Record how a raising attempt ended: failed, retried or aborted."""
    from opentelemetry.trace import Status, StatusCode

    outcome = outcome_of(job, error)
    span.set_attribute("qless.job.outcome", outcome)
    if outcome == "aborted":
        # Given back to the queue (shutdown, lost lease): not the job's error.
        span.add_event("qless.job.aborted", {"exception.type": _error_type(error),
                                             "exception.message": str(error)})
        span.set_status(Status(StatusCode.ERROR, f"aborted: {error}"[:1024]))
        return
    _set_error(span, reported_error(job, error))
    if outcome == "retried":
        span.add_event("qless.job.retry", {"qless.job.attempt": attempt.attempt,
                                           "qless.job.retries_left": max(0, job.retries)})
