"""Helpers for testing code that enqueues jobs.

* ``eager()`` (context manager / decorator) or ``QLESS["EAGER"]`` / per-alias ``EAGER``:
  ``enqueue`` runs the job inline, at once (arguments still go through JSON), exceptions
  propagate. It does not wait for a commit, so it works in transactions that never commit
  (``TestCase``, pytest-django's ``django_db``).
* ``run_queued(queues=...)``: drain real queues in this process and return what happened to
  each job.

Both run jobs through the worker's own runner (``running.job_runner``): registry, middleware,
retry policy, stored result and failure groups are the worker's.
* ``build_job(klass, data)``: a real ``Job`` object without Redis, for unit-testing job code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.core.workers.runner import Outcome
from django_qless.running import build_job, eager, eager_active, job_runner

__all__ = ["JobOutcome", "build_job", "eager", "eager_active", "run_queued"]


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

    client = get_client(alias)
    runner = job_runner(DjangoWorkerHooks(alias))
    names = [queues] if isinstance(queues, str) else list(
        queues or [q for shard in client.clients() for q in shard.queues.names()])
    done: list[JobOutcome] = []
    while len(done) < max_jobs:
        job = next((j for j in (client.for_queue(q).queues[q].pop() for q in names)
                    if j is not None), None)
        if job is None:
            break
        # The worker's runner: registry, hooks, middleware, sandbox, failure groups.
        if runner.run(job) is Outcome.COMPLETED:
            job.complete()
        error = runner.error
        outcome = "unknown" if isinstance(error, UnregisteredJobClass) else outcome_of(error)
        done.append(JobOutcome(job.jid, job.klass_name, job.queue_name, outcome,
                               runner.value, error))
        if error is not None and outcome == "failed" and raise_errors:
            raise error
    return done
