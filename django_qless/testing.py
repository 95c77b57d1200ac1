"""Helpers for testing code that enqueues jobs.

* ``eager()`` (context manager / decorator) or ``QLESS["EAGER"]`` / per-alias ``EAGER``:
  ``enqueue`` runs the job inline, at once (arguments still go through JSON), exceptions
  propagate. It does not wait for a commit, so it works in transactions that never commit
  (``TestCase``, pytest-django's ``django_db``).
* ``run_queued(queues=...)``: drain real queues in this process, through the registry and the
  Django hooks, and return what happened to each job.
* ``build_job(klass, data)``: a real ``Job`` object without Redis, for unit-testing job code.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from django_qless.core.client import Client
from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.core.job import Job
from django_qless.core.workers.runner import error_group, format_failure

__all__ = ["JobOutcome", "build_job", "eager", "eager_active", "run_queued"]

_EAGER: contextvars.ContextVar[dict[str | None, bool]] = contextvars.ContextVar(
    "django_qless_eager", default={}  # noqa: B039 - never mutated, replaced per context
)


@contextmanager
def eager(enabled: bool = True, *, alias: str | None = None) -> Iterator[None]:
    """Run jobs inline (for every alias, or just ``alias``) inside the block."""
    current = dict(_EAGER.get())
    current[alias] = enabled
    token = _EAGER.set(current)
    try:
        yield
    finally:
        _EAGER.reset(token)


def eager_active(alias: str) -> bool:
    """Return whether jobs for ``alias`` run inline right now."""
    override = _EAGER.get()
    if alias in override:
        return override[alias]
    if None in override:
        return override[None]
    from django_qless.conf import get_settings

    return get_settings().is_eager(alias)


_DETACHED: Client | None = None


def _detached_client() -> Client:
    """Return a client whose Redis is never reached (jobs built for unit tests)."""
    global _DETACHED
    if _DETACHED is None:
        _DETACHED = Client("unix:///nonexistent/django-qless-detached",
                           worker_name="test-worker", _clock=time.time)
    return _DETACHED


def build_job(klass: str | type, data: Mapping[str, Any] | None = None, *,
              queue: str = "default", jid: str | None = None, priority: int = 0,
              tags: Iterable[str] = (), state: str = "running", retries: int = 5,
              remaining: int | None = None, worker: str = "test-worker",
              client: Client | None = None, **fields: Any) -> Job:
    """Make a real ``Job`` from the given fields, without touching Redis."""
    from django_qless.core.registry import klass_name_of
    from django_qless.core.serialization import new_jid

    name = klass if isinstance(klass, str) else klass_name_of(klass)
    now = time.time()
    record = {
        "jid": jid or new_jid(), "klass": name, "queue": queue, "data": dict(data or {}),
        "priority": priority, "tags": list(tags), "state": state, "worker": worker,
        "expires": now + 60 if state == "running" else 0, "retries": retries,
        "remaining": retries if remaining is None else remaining,
        "history": [{"what": "put", "q": queue, "when": now}], "dependencies": [],
        "dependents": [], "failure": {}, "tracked": False, "throttles": [],
        **fields,
    }
    return Job(client or _detached_client(), record, owner=worker)


@dataclass(frozen=True)
class JobOutcome:
    """What ``run_queued`` did with one job."""

    jid: str
    klass: str
    queue: str
    outcome: str  # "completed", "failed", "retried", "unknown"
    result: Any = None
    error: BaseException | None = None


def run_queued(queues: Iterable[str] | str | None = None, *, alias: str = "default",
               max_jobs: int = 1000, raise_errors: bool = False) -> list[JobOutcome]:
    """Pop and run jobs from ``queues`` (default: every known queue) until they are empty.

    Jobs run in this process through the registry and the Django worker hooks; the
    outcome of each is returned. Scheduled jobs not yet due are left alone.
    """
    from django_qless.clients import get_client
    from django_qless.hooks import DjangoWorkerHooks, outcome_of
    from django_qless.registry import UNKNOWN_JOB_GROUP, get_registry

    client = get_client(alias)
    registry = get_registry()
    hooks = DjangoWorkerHooks()
    names = [queues] if isinstance(queues, str) else list(queues or client.queues.names())
    done: list[JobOutcome] = []
    while len(done) < max_jobs:
        job = next((j for j in (client.queues[q].pop() for q in names) if j is not None), None)
        if job is None:
            break
        try:
            entry = registry.resolve(job.klass_name)
        except UnregisteredJobClass as exc:
            job.fail(UNKNOWN_JOB_GROUP, str(exc))
            done.append(JobOutcome(job.jid, job.klass_name, job.queue_name, "unknown",
                                   error=exc))
            continue
        error: BaseException | None = None
        result: Any = None
        try:
            result = hooks.around_job(job, lambda: entry.handler(job.queue_name)(job))  # noqa: B023
        except Exception as exc:
            error = exc
        outcome = outcome_of(error)
        if outcome == "completed" and job.state == "running":
            job.complete()
        elif outcome == "failed" and job.state == "running":
            assert error is not None
            job.fail(error_group(error), format_failure(error))
        done.append(JobOutcome(job.jid, job.klass_name, job.queue_name, outcome, result, error))
        if error is not None and outcome == "failed" and raise_errors:
            raise error
    return done
