"""Helpers for testing code that enqueues jobs.

* ``eager()`` (context manager / decorator) or ``QLESS["EAGER"]`` / per-alias ``EAGER``:
  ``enqueue`` runs the job inline, at once (arguments still go through JSON), exceptions
  propagate. It does not wait for a commit, so it works in transactions that never commit
  (``TestCase``, pytest-django's ``django_db``).
* ``run_queued(queues=...)``: send the enqueues still waiting for a commit (a test's
  transaction never commits), then drain real queues in this process and return what
  happened to each job.
* ``send_pending()``: only the first half: send the enqueues waiting for a commit.

Both run jobs through the worker's own runner (``running.job_runner``): registry, middleware,
retry policy, stored result and failure groups are the worker's.
* ``build_job(klass, data)``: a real ``Job`` object without Redis, for unit-testing job code.
* ``flush_keyspace(alias)``: empty an alias's qless keyspace between tests (the
  ``qless_keyspace`` fixture of ``django_qless.pytest_plugin`` calls it); refuses a server
  that does not look like a test server.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.core.workers.runner import Outcome
from django_qless.running import build_job, eager, eager_active, job_runner

if TYPE_CHECKING:
    from django_qless.conf import AliasSettings

__all__ = ["TEST_MARK", "JobOutcome", "NotATestServer", "build_job", "eager", "eager_active",
           "flush_keyspace", "run_queued", "send_pending"]


@dataclass(frozen=True)
class JobOutcome:
    """What ``run_queued`` did with one job."""

    jid: str
    klass: str
    queue: str
    outcome: str  # "completed", "failed", "retried", "unknown"
    result: Any = None
    error: BaseException | None = None


def send_pending(using: str | None = None) -> int:
    """Send the enqueues waiting for this thread's transactions to commit; return how many.

    Only django-qless's own on-commit callbacks run (as ``captureOnCommitCallbacks(
    execute=True)`` would run them), and they leave the on-commit list, so a later commit
    does not send them twice. Those of a rolled-back savepoint are gone already.
    """
    from django.db import connections

    from django_qless.handle import PendingSend

    targets = [connections[using]] if using else connections.all(initialized_only=True)
    sent = 0
    for conn in targets:
        pending = [entry for entry in conn.run_on_commit if isinstance(entry[1], PendingSend)]
        conn.run_on_commit = [e for e in conn.run_on_commit if e not in pending]
        for entry in pending:
            entry[1]()
            sent += 1
    return sent


def run_queued(queues: Iterable[str] | str | None = None, *, alias: str = "default",
               max_jobs: int = 1000, raise_errors: bool = False) -> list[JobOutcome]:
    """Pop and run jobs from ``queues`` (default: every known queue) until they are empty.

    Enqueues still waiting for a commit are sent first (``send_pending``): in a test whose
    transaction never commits (pytest-django's ``django_db``, ``TestCase``) they would
    otherwise never reach Redis. Jobs run in this process through the registry and the
    Django worker hooks; the outcome of each is returned. Scheduled jobs not yet due are
    left alone.
    """
    from django_qless.clients import get_client
    from django_qless.hooks import DjangoWorkerHooks, outcome_of

    send_pending()
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


#: The qless config key that marks a keyspace as one ``flush_keyspace`` may empty again.
TEST_MARK = "django-qless-test-keyspace"
_LOOPBACK = ("localhost", "127.0.0.1", "::1")


class NotATestServer(Exception):  # noqa: N818 - names the refusal, as Django's errors do
    """``flush_keyspace`` refused a server that does not look like a test server."""


def _test_host(settings: AliasSettings) -> bool:
    """Tell whether every host of the alias is local or listed in ``QLESS_TEST_HOSTS``."""
    import os
    from urllib.parse import urlsplit

    allowed = {h.strip() for h in os.environ.get("QLESS_TEST_HOSTS", "").split(",") if h.strip()}
    if settings.cluster is not None:
        hosts: list[str | None] = [host for host, _ in settings.cluster.addresses]
    elif settings.sentinels:
        hosts = [host for host, _ in settings.sentinels]
    else:
        parts = urlsplit(settings.url or "")
        if parts.scheme == "unix":
            return True
        hosts = [parts.hostname]
    return all(h in _LOOPBACK or h in allowed for h in hosts)


def flush_keyspace(alias: str = "default") -> int:
    """Delete every qless key of ``alias`` (each shard of a cluster alias); return how many.

    Refuses (``NotATestServer``) a server that is not local (a unix socket or a loopback
    host, or a host listed in the ``QLESS_TEST_HOSTS`` environment variable), and a
    keyspace that holds data but was never flushed by this function (its qless config has
    no test mark): it is then someone's data, not a previous test's.
    """
    from django_qless.clients import get_client
    from django_qless.conf import get_settings

    settings = get_settings().aliases[alias]
    if not _test_host(settings):
        raise NotATestServer(
            f"refusing to flush QLESS[{alias!r}] ({settings.display}): not a local server; "
            "point the tests at a local Redis, or list its host in QLESS_TEST_HOSTS")
    from django_qless.core.reset import has_data, reset

    removed = 0
    for shard in get_client(alias).clients():
        if shard.config.get(TEST_MARK) is None and has_data(shard):
            raise NotATestServer(
                f"refusing to flush QLESS[{alias!r}] ({settings.display}): its qless data "
                "was not written by tests; use an empty database for tests (e.g. "
                "redis://localhost:6379/15), or empty this one yourself once")
        removed += reset(shard)
        shard.config[TEST_MARK] = 1
    return removed
