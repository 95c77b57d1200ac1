"""Sentry for qless jobs: `sentry_sdk.init(dsn, integrations=[QlessIntegration()])`.

Once initialised in a process (Django settings, or a module the worker imports with
`--import`), every job a worker in that process runs is reported:

- an exception a job raises becomes an event tagged `qless.jid`, `qless.queue`,
  `qless.klass`, `qless.attempt` and `qless.retries_left`, with the job (and its data,
  size-capped, sensitive-looking keys filtered) as the `qless_job` context; one event per
  failed attempt, or only the final failure with `only_final_failure=True`;
- records the job logs while it runs become its breadcrumbs (each job starts a fresh scope);
- each job runs in a `queue.process` span (a transaction) named after its klass (a
  `django.tasks` task: its path) that continues the trace active when it was put;
- a put inside a span gets a `queue.publish` child span, and every put carries the Sentry
  trace headers in the job data (see `TRACE_KEY`).

A worker's process flushes its events when it stops taking jobs, before a forked child
leaves with `os._exit`. Works with sentry-sdk 2 (transactions) and 3 (streamed spans).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import sentry_sdk
from sentry_sdk.integrations import Integration
from sentry_sdk.scope import add_global_event_processor
from sentry_sdk.utils import capture_internal_exceptions, event_from_exception

from django_qless.core import integrations
from django_qless.core.integrations.jobinfo import (
    FINAL_FAILURES,
    Attempt,
    outcome_of,
    reported_error,
    scrubbed_data,
)
from django_qless.core.workers.runner import WorkerHooks

if TYPE_CHECKING:
    from django_qless.core.integrations import PendingPut
    from django_qless.core.job import Job
    from django_qless.core.workers.runner import WorkerInfo

__all__ = ["QlessIntegration"]

ORIGIN = "auto.queue.qless"
# sentry-sdk 3 streams spans and has no transactions; 2 has both.
_TRANSACTIONS = hasattr(sentry_sdk, "start_transaction")
_WORKER_LOGGER = "django_qless.worker"
# Loggers whose records are not the job's own (the worker's, the SDK's).
_NOT_CRUMBS = (_WORKER_LOGGER, "sentry_sdk")


class QlessIntegration(Integration):
    """Report qless job failures, breadcrumbs and performance to Sentry."""

    identifier = "qless"
    origin = ORIGIN

    def __init__(self, *, only_final_failure: bool = False, send_job_data: bool | None = None,
                 max_data_bytes: int = 4096, flush_timeout: float = 2.0) -> None:
        """Configure the integration.

        `only_final_failure`: report only the attempt after which the job is failed, not
        the attempts that are retried. `send_job_data`: attach the job's data to events
        (default: the SDK's `data_collection["queues"]` where it has one). `max_data_bytes`:
        cap on that data as JSON. `flush_timeout`: how long a stopping worker waits for
        events to leave.
        """
        self.only_final_failure = only_final_failure
        self.send_job_data = send_job_data
        self.max_data_bytes = max_data_bytes
        self.flush_timeout = flush_timeout

    @staticmethod
    def setup_once() -> None:
        """Join every worker and every put in this process (again after an uninstall)."""
        global _processor_added
        integrations.install_hooks(_HOOKS)
        integrations.install_put_middleware(_sentry_put)
        if not _processor_added:
            add_global_event_processor(_drop_worker_duplicates)
            _processor_added = True

    @staticmethod
    def uninstall() -> None:
        """Leave the puts and the workers built from now on alone (tests, mostly)."""
        integrations.uninstall_hooks(_HOOKS)
        integrations.uninstall_put_middleware(_sentry_put)


_processor_added = False


def _active() -> QlessIntegration | None:
    """Return the integration if the current Sentry client has it enabled."""
    return sentry_sdk.get_client().get_integration(QlessIntegration)


# -- put --------------------------------------------------------------------------------------


def _sentry_put(put: PendingPut, call_next: Callable[[], str]) -> str:
    """Send the trace headers with the job; time the put as a child of the current span."""
    if _active() is None:
        return call_next()
    with capture_internal_exceptions():
        traceparent = sentry_sdk.get_traceparent()
        if traceparent:
            put.add_headers({"sentry-trace": traceparent})
            baggage = sentry_sdk.get_baggage()
            if baggage:
                put.add_headers({"baggage": baggage})
    if sentry_sdk.get_current_span() is None:
        return call_next()
    attributes = {
        "messaging.system": "qless",
        "messaging.destination.name": put.queue.name,
        "messaging.message.id": put.jid,
        "qless.klass": put.klass,
    }
    with _child_span("queue.publish", put.klass, attributes):
        # The headers name the publish span as the job's parent.
        with capture_internal_exceptions():
            traceparent = sentry_sdk.get_traceparent()
            if traceparent:
                put.headers["sentry-trace"] = traceparent
        return call_next()


def _child_span(op: str, name: str, attributes: dict[str, Any]) -> Any:
    """Start a span under the current one (either major version of the SDK)."""
    if _TRANSACTIONS:
        span = sentry_sdk.start_span(op=op, name=name, origin=ORIGIN)
        for key, value in attributes.items():
            span.set_data(key, value)  # type: ignore[attr-defined, unused-ignore]
        return span
    return sentry_sdk.start_span(
        name=name, attributes={"sentry.op": op, "sentry.origin": ORIGIN, **attributes})


# -- worker -----------------------------------------------------------------------------------


class _SentryHooks(WorkerHooks):
    """Wrap each job in a fresh scope and a span; flush before the process stops."""

    def around_job(self, job: Job, call_next: Callable[[], Any]) -> Any:
        integration = _active()
        if integration is None:
            return call_next()
        try:
            attempt = Attempt.of(job)
            headers = integrations.trace_headers(job)
        except Exception:  # never fail a job for its report
            return call_next()
        with sentry_sdk.isolation_scope() as scope, _breadcrumbs_from_logging():
            scope.clear_breadcrumbs()
            scope.add_event_processor(_job_processor(integration, job, attempt))
            with _job_span(attempt, headers) as span:
                try:
                    result = call_next()
                except BaseException as exc:
                    outcome = outcome_of(job, exc)
                    _set_outcome(span, outcome)
                    if outcome != "aborted":
                        _report(integration, reported_error(job, exc), outcome, attempt)
                    raise
                _set_outcome(span, outcome_of(job, None))
                return result

    def on_worker_stop(self, worker: WorkerInfo) -> None:
        integration = _active()
        if integration is not None:
            # A forked child leaves with os._exit, which runs no atexit handler.
            sentry_sdk.flush(timeout=integration.flush_timeout)


_HOOKS = _SentryHooks()


class _BreadcrumbHandler(logging.Handler):
    """Turn the records the job's thread logs (INFO and up) into breadcrumbs."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.thread_id = threading.get_ident()

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread != self.thread_id or record.name.startswith(_NOT_CRUMBS):
            return
        with capture_internal_exceptions():
            sentry_sdk.add_breadcrumb(
                type="log", category=record.name, level=record.levelname.lower(),
                message=record.getMessage(),
                timestamp=datetime.fromtimestamp(record.created, UTC),
                data={"logger": record.name, "lineno": record.lineno,
                      "function": record.funcName},
            )


@contextmanager
def _breadcrumbs_from_logging() -> Iterator[None]:
    """Record the job's log records as breadcrumbs while it runs.

    sentry-sdk 2's default logging integration does this for every record already; with
    it absent (sentry-sdk 3 leaves it off by default) a handler on the root logger does,
    for the job's own thread, and only while the job runs.
    """
    if sentry_sdk.get_client().get_integration("logging") is not None:
        yield
        return
    handler = _BreadcrumbHandler()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield
    finally:
        root.removeHandler(handler)


def _job_span(attempt: Attempt, headers: dict[str, str]) -> Any:
    """Continue the job's trace and start its root span (a transaction on sentry-sdk 2)."""
    attributes: dict[str, Any] = {
        "messaging.system": "qless",
        "messaging.destination.name": attempt.queue,
        "messaging.message.id": attempt.jid,
        "messaging.message.retry.count": attempt.attempt - 1,
        "qless.klass": attempt.klass,
        "qless.attempt": attempt.attempt,
        "qless.worker": attempt.worker,
    }
    if _TRANSACTIONS:
        continue_trace: Any = sentry_sdk.continue_trace
        start_transaction: Any = getattr(sentry_sdk, "start_transaction")  # noqa: B009
        transaction = continue_trace(headers, op="queue.process", name=attempt.name,
                                     source="task", origin=ORIGIN)
        for key, value in attributes.items():
            transaction.set_data(key, value)
        return start_transaction(transaction, custom_sampling_context={"qless_job": attempt})
    sentry_sdk.continue_trace(headers)
    with capture_internal_exceptions():
        # What a traces_sampler sees, as with a sentry-sdk 2 transaction.
        sentry_sdk.get_current_scope().set_custom_sampling_context({"qless_job": attempt})
    return sentry_sdk.start_span(
        name=attempt.name, parent_span=None,
        attributes={"sentry.op": "queue.process", "sentry.origin": ORIGIN,
                    "sentry.segment.name.source": "task", **attributes})


def _set_outcome(span: Any, outcome: str) -> None:
    """Record how the attempt ended on its span."""
    with capture_internal_exceptions():
        if _TRANSACTIONS:
            span.set_data("qless.outcome", outcome)
            span.set_status("ok" if outcome == "completed" else
                            "aborted" if outcome == "aborted" else "internal_error")
        else:
            span.set_attribute("qless.outcome", outcome)
            span.status = "ok" if outcome == "completed" else "error"


def _job_processor(integration: QlessIntegration, job: Job, attempt: Attempt) -> Any:
    """Return an event processor adding the job's tags and context to events in its scope."""

    def process(event: dict[str, Any], hint: dict[str, Any]) -> dict[str, Any]:
        with capture_internal_exceptions():
            tags = event.setdefault("tags", {})
            tags.setdefault("qless.jid", attempt.jid)
            tags.setdefault("qless.queue", attempt.queue)
            tags.setdefault("qless.klass", attempt.name)
            tags.setdefault("qless.attempt", str(attempt.attempt))
            tags.setdefault("qless.retries_left", str(attempt.retries_left))
            context: dict[str, Any] = {
                "jid": attempt.jid, "queue": attempt.queue, "klass": attempt.klass,
                "attempt": attempt.attempt, "retries_left": attempt.retries_left,
                "retries": attempt.retries, "worker": attempt.worker,
            }
            context["priority"] = job.priority
            context["tags"] = list(job.tags)
            if _send_data(integration):
                context["data"] = scrubbed_data(job.data, integration.max_data_bytes)
            event.setdefault("contexts", {})["qless_job"] = context
        return event

    return process


def _send_data(integration: QlessIntegration) -> bool:
    """Tell whether job data goes with events (the SDK's data-collection switch)."""
    if integration.send_job_data is not None:
        return integration.send_job_data
    collection = sentry_sdk.get_client().options.get("data_collection")
    if isinstance(collection, dict):
        return bool(collection.get("queues", True))
    return True  # an SDK without the switch: as its own queue integrations do


# Exceptions and jids reported here recently: the worker's own log line about the same
# failure is not sent again as a second event.
# (Exceptions are kept by identity and type only: holding them would keep job frames alive.)
_reported_errors: deque[tuple[int, type[BaseException]]] = deque(maxlen=16)
_reported_jids: deque[str] = deque(maxlen=16)


def _report(integration: QlessIntegration, error: BaseException, outcome: str,
            attempt: Attempt) -> None:
    """Capture one failed attempt (unless only final failures are wanted)."""
    with capture_internal_exceptions():
        _reported_errors.append((id(error), type(error)))
        _reported_jids.append(attempt.jid)
        if integration.only_final_failure and outcome not in FINAL_FAILURES:
            return
        event, hint = event_from_exception(
            error, **_client_options(), mechanism={"type": "qless", "handled": False})
        event.setdefault("tags", {})["qless.outcome"] = outcome
        sentry_sdk.capture_event(event, hint=hint)


def _client_options() -> dict[str, Any]:
    """Return the keyword arguments sentry-sdk 2's `event_from_exception` needs."""
    if _TRANSACTIONS:
        return {"client_options": sentry_sdk.get_client().options}
    return {}


def _drop_worker_duplicates(event: Any, hint: dict[str, Any]) -> Any:
    """Drop a worker log event about a failure this integration has already reported."""
    logger = event.get("logger")
    if not isinstance(logger, str) or not logger.startswith(_WORKER_LOGGER):
        return event
    if _active() is None:
        return event
    exc_info = hint.get("exc_info")
    error = exc_info[1] if exc_info else None
    if error is not None and (id(error), type(error)) in _reported_errors:
        return None
    record = hint.get("log_record")
    jid = getattr(record, "jid", None) if isinstance(record, logging.LogRecord) else None
    if jid is not None and jid in _reported_jids:
        # One log line per reported failure: a later, different error of the job still goes.
        _reported_jids.remove(jid)
        return None
    return event
