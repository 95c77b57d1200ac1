"""Running ``@job`` jobs: the call, the retry policy, the return value, and jobs run inline.

Every path runs a job through the worker's own ``JobRunner`` (registry look-up, hooks,
middleware, sandbox, failure groups): the worker, ``testing.run_queued`` and eager mode.
Eager mode lives here, not in ``testing``, so a production enqueue never imports the
testing helpers.
"""

from __future__ import annotations

import contextvars
import logging
import os
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from django_qless.core.client import Client
from django_qless.core.flows import received
from django_qless.core.job import Job
from django_qless.core.workers.runner import (
    JobRunner,
    Outcome,
    WorkerHooks,
    job_extra,
)
from django_qless.core.workers.shutdown import AbortGuard
from django_qless.options import RESULT_KEY, to_json

if TYPE_CHECKING:
    from django_qless.decorators import JobFunction
    from django_qless.options import JobOptions

__all__ = [
    "RetryScheduled", "build_job", "eager", "eager_active", "job_runner", "perform_function",
    "run_eager", "store_result",
]

log = logging.getLogger("django_qless")

_EAGER: contextvars.ContextVar[dict[str | None, bool]] = contextvars.ContextVar(
    "django_qless_eager", default={}  # noqa: B039 - never mutated, replaced per context
)


class RetryScheduled(Exception):  # noqa: N818 - an outcome, not an error
    """The job raised a retryable exception and was put back with a delay."""

    logged = True  # (logged here, with its delay: the worker does not log it again)


def perform_function(target: JobFunction[Any, Any], job: Job) -> Any:
    """Run a function job for a worker; see ``JobFunction.process``."""
    data = job.data if isinstance(job.data, dict) else {}
    try:
        # A flow step gets what the steps it follows returned as its first argument; the
        # stored data is left as it was.
        given = received(job)
        if given:
            data = {**data, "args": [*given, *data.get("args", [])]}
        value = target.call_with(data)
    except Exception as exc:
        policy = target.options.retry
        if policy is None or not policy.matches(exc) or job.retries <= 0:
            raise
        attempt = max(1, job.original_retries - job.retries + 1)
        delay = policy.backoff.delay(attempt)
        group = f"{type(exc).__module__}.{type(exc).__qualname__}"
        priority = policy.priority_for(job.priority, attempt)
        job.retry(delay, group, f"{exc}"[:4000] or group, priority=priority)
        log.warning("job %s retried in %.1fs after %s: %s (attempt %d)", job.jid, delay, group,
                    f"{exc}"[:200], attempt, extra={**job_extra(job), "attempt": attempt})
        raise RetryScheduled(f"retry in {delay:.1f}s after {group}") from exc
    store_result(job, value)
    return value


def store_result(job: Job, value: Any) -> None:
    """Keep the return value in the job data (saved by complete) if it is JSON."""
    try:
        encoded = to_json(value, f"return value of {job.klass_name}")
    except TypeError:
        log.warning("job %s returned a non-JSON value; it is not stored", job.jid)
        return
    if isinstance(job.data, dict):
        job.data[RESULT_KEY] = encoded


def job_runner(hooks: WorkerHooks) -> JobRunner:
    """Return a runner for this process, built as a worker builds its own."""
    from django_qless.core.worker_options import WorkerConfig
    from django_qless.core.workers.runner import Sandbox
    from django_qless.registry import get_registry

    config = WorkerConfig(registry=get_registry())
    sandbox = Sandbox(config.sandbox_root, f"inline-{os.getpid()}")
    return JobRunner(config, hooks, config.registry, sandbox, AbortGuard(), remember=True)


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
    return _record_job(Job, klass, data, queue=queue, jid=jid, priority=priority, tags=tags,
                       state=state, retries=retries, remaining=remaining, worker=worker,
                       client=client, **fields)


def _record_job(cls: type[Job], klass: str | type, data: Mapping[str, Any] | None, *,
                queue: str, jid: str | None, priority: int, tags: Iterable[str], state: str,
                retries: int, remaining: int | None, worker: str, client: Client | None,
                **fields: Any) -> Job:
    """Build a `cls` job from the given fields, as the engine would describe it."""
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
    return cls(client or _detached_client(), record, owner=worker)


class _InlineJob(Job):
    """A job run in the caller: completing, failing or retrying it changes only this object."""

    __slots__ = ()

    def complete(self, next: str | None = None, *, delay: float | None = None,  # noqa: A002
                 depends: Iterable[str] | None = None) -> str:
        """Mark the job complete (nothing is sent)."""
        self._released("complete", next or self.queue_name)
        return "complete"

    def fail(self, group: str, message: str) -> str:
        """Mark the job failed in `group` (nothing is sent)."""
        self._failure = {"group": group, "message": message, "when": time.time()}
        self._released("failed", self.queue_name)
        return self.jid

    def retry(self, delay: float = 0, group: str | None = None, message: str | None = None,
              *, priority: int | None = None) -> int:
        """Count one retry and mark the job waiting, or failed when none is left."""
        self._remaining -= 1
        if priority is not None and self._remaining >= 0:
            self._priority = priority
        self._released("failed" if self._remaining < 0 else "waiting", self.queue_name)
        return self._remaining

    def run_again(self) -> None:
        """Take the job back after a retry, as a worker popping it would."""
        self._state = "running"


def run_eager(klass: str, data: dict[str, Any], options: JobOptions) -> Any:
    """Run a job inline through the worker's runner; return its stored result.

    A retry (``retry_on``) runs it again at once, without the back-off delay; a failure
    raises the job's exception, as the worker would have failed the job with it.
    """
    job = _record_job(_InlineJob, klass, data, queue=options.queue, jid=options.jid,
                      priority=options.priority, tags=options.tags, state="running",
                      retries=options.retries, remaining=None, worker="eager", client=None)
    assert isinstance(job, _InlineJob)
    runner = job_runner(WorkerHooks())
    while True:
        outcome = runner.run(job)
        if outcome is Outcome.COMPLETED:
            job.complete()
        if not isinstance(runner.error, RetryScheduled) or job.state != "waiting":
            break
        job.run_again()
    if runner.error is not None and job.state == "failed":
        raise runner.error
    stored = job.data
    return stored.get(RESULT_KEY) if isinstance(stored, dict) else None
