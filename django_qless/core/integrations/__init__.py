"""Process-wide instrumentation seams: put middleware and worker hooks added by integrations.

Tracing and error-reporting integrations (`integrations.sentry`, `integrations.otel`) install
themselves here once per process, so that every client's `Queue.put` and every worker's job
loop see them without the application passing anything around:

- put middleware, `mw(put, call_next) -> jid`, wraps each `Queue.put`; it may add
  propagation headers to `put.headers`, which travel in the job's data under `TRACE_KEY`;
- worker hooks (`WorkerHooks` objects) join the hooks the worker was given, outermost first.

With nothing installed, a put and a job cost one empty-tuple test each. This module imports
no third-party package; the integrations import theirs lazily.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.queue import Queue
    from django_qless.core.workers.runner import WorkerHooks

__all__ = [
    "TRACE_KEY",
    "PendingPut",
    "PutMiddleware",
    "around_put",
    "install_hooks",
    "install_put_middleware",
    "installed_hooks",
    "put_middleware",
    "trace_headers",
    "uninstall_hooks",
    "uninstall_put_middleware",
    "with_installed_hooks",
]

# The key of a job's (dict) data under which propagation headers travel: a JSON object of
# header name -> value ("traceparent", "tracestate", "sentry-trace", "baggage"). Any qless
# client reads the job as before; job code sees one more key in `job.data`.
TRACE_KEY = "_qless_trace"


@dataclass
class PendingPut:
    """One put on its way to the engine, as put middleware sees it."""

    queue: Queue
    klass: str
    jid: str
    data: Mapping[str, Any]
    # Propagation headers middleware adds; stored in the data under TRACE_KEY if any.
    headers: dict[str, str] = field(default_factory=dict)

    def add_headers(self, headers: Mapping[str, str]) -> None:
        """Add propagation headers; W3C `baggage` lists from several tracers are joined."""
        for name, value in headers.items():
            old = self.headers.get(name)
            if name == "baggage" and old and value and value not in old:
                value = f"{old},{value}"
            self.headers[name] = value


PutMiddleware = Callable[[PendingPut, Callable[[], str]], str]
T = TypeVar("T")


class _Installed(Generic[T]):
    """What is installed of one kind, outermost first; each item at most once."""

    def __init__(self) -> None:
        self.items: tuple[T, ...] = ()

    def add(self, item: T) -> None:
        if item not in self.items:
            self.items = (*self.items, item)

    def remove(self, item: T) -> None:
        # By equality: a bound method is a new object at each access, equal to the last.
        self.items = tuple(i for i in self.items if i != item)


_put_middleware: _Installed[PutMiddleware] = _Installed()
_hooks: _Installed[WorkerHooks] = _Installed()


def put_middleware() -> tuple[PutMiddleware, ...]:
    """Return the installed put middleware (outermost first)."""
    return _put_middleware.items


def installed_hooks() -> tuple[WorkerHooks, ...]:
    """Return the installed worker hooks (outermost first)."""
    return _hooks.items


def install_put_middleware(middleware: PutMiddleware) -> None:
    """Add `middleware` around every put in this process (once; a repeat is ignored)."""
    _put_middleware.add(middleware)


def uninstall_put_middleware(middleware: PutMiddleware) -> None:
    """Remove `middleware` if installed."""
    _put_middleware.remove(middleware)


def install_hooks(hooks: WorkerHooks) -> None:
    """Add `hooks` to every worker built in this process from now on (once)."""
    _hooks.add(hooks)


def uninstall_hooks(hooks: WorkerHooks) -> None:
    """Remove `hooks` if installed (workers already built keep them)."""
    _hooks.remove(hooks)


def with_installed_hooks(hooks: WorkerHooks) -> WorkerHooks:
    """Return `hooks` with the installed ones around them (`hooks` itself if none are)."""
    if not _hooks.items:
        return hooks
    from django_qless.core.workers.runner import CompositeHooks

    return CompositeHooks(*_hooks.items, hooks)


def around_put(put: PendingPut, send: Callable[[Mapping[str, Any]], str]) -> str:
    """Run `send(data)` inside the installed put middleware; return the jid it returns."""
    chain = _put_middleware.items

    def call(index: int) -> str:
        if index < len(chain):
            return chain[index](put, lambda: call(index + 1))
        data = put.data
        if put.headers and isinstance(data, Mapping):
            data = {**data, TRACE_KEY: dict(put.headers)}
        return send(data)

    return call(0)


def trace_headers(job: Job) -> dict[str, str]:
    """Return the propagation headers a job carries (empty if none or not a dict)."""
    if TRACE_KEY not in job.raw_data:
        return {}  # without decoding data the job may never read
    data = job.data
    if not isinstance(data, dict):
        return {}
    headers = data.get(TRACE_KEY)
    if not isinstance(headers, dict):
        return {}
    return {str(k): str(v) for k, v in headers.items() if isinstance(v, str)}
