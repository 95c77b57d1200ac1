"""What an enqueue returns (``JobHandle``) and how its send waits for the commit (``dispatch``).

Every path (immediate, delayed, scheduled, recurring, with dependencies) goes through
:func:`dispatch`, so the commit mode applies to all of them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_qless.conf import get_settings
from django_qless.errors import JobFailedError, ResultNotReady, ResultTimeout

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job
    from django_qless.core.recurring import RecurringJob
    from django_qless.options import JobOptions

__all__ = ["RESULT_KEY", "JobHandle", "NotInstalledWarning", "PendingSend", "dispatch",
           "warn_if_not_installed"]

log = logging.getLogger("django_qless")

# The job data key a function job's return value is stored under.
RESULT_KEY = "result"

_INSTALL_CHECKED = False


class NotInstalledWarning(RuntimeWarning):
    """Jobs are enqueued while ``django_qless`` is missing from ``INSTALLED_APPS``."""


def warn_if_not_installed() -> None:
    """Warn once per process when jobs are enqueued without the app installed.

    Enqueueing works without it, but nothing else does (no ``qless_worker`` command, no
    system checks, no dashboard): without this warning the first sign is a queue that
    never drains. A system check cannot say it, since checks run only for installed apps.
    """
    global _INSTALL_CHECKED
    if _INSTALL_CHECKED:
        return
    _INSTALL_CHECKED = True
    from django.apps import apps

    if apps.ready and not apps.is_installed("django_qless"):
        import warnings

        warnings.warn(
            "django_qless is not in INSTALLED_APPS: jobs are enqueued, but manage.py "
            "qless_worker, the system checks and the dashboard are unavailable, so nothing "
            "runs them. Add 'django_qless' to INSTALLED_APPS.",
            NotInstalledWarning, stacklevel=4)


class JobHandle:
    """What an enqueue returns: the jid, where it went, and whether it was sent yet.

    ``status``: "pending" (waiting for the transaction to commit), "discarded" (the
    transaction, or the savepoint around the enqueue, rolled back: never sent), "error"
    (the send at commit raised), "enqueued", "skipped" (unique job already active),
    "exists" (unique job kept, maybe with a raised priority), "eager" (ran inline),
    "recurring".
    """

    def __init__(self, jid: str, klass: str, queue: str, alias: str,
                 status: str = "pending") -> None:
        self.jid, self.klass, self.queue, self.alias = jid, klass, queue, alias
        self._status = status
        self._value: Any = None
        # (database, callback) while the send waits in that connection's on-commit list.
        self._waiting: tuple[str, Callable[[], None]] | None = None

    def __repr__(self) -> str:
        return (f"JobHandle(jid={self.jid!r}, klass={self.klass!r}, queue={self.queue!r}, "
                f"alias={self.alias!r}, status={self.status!r})")

    @property
    def status(self) -> str:
        """Return where the enqueue stands (see the class docstring)."""
        if self._status == "pending" and self._waiting is not None:
            database, callback = self._waiting
            queued = transaction.get_connection(database).run_on_commit
            # Django drops the callbacks of a rolled-back transaction or savepoint.
            if not any(entry[1] is callback for entry in queued):
                self._status = "discarded"
        return self._status

    @status.setter
    def status(self, value: str) -> None:
        self._status = value

    @property
    def client(self) -> Client:
        """Return the core client holding this job's queue (its shard's, when sharded)."""
        from django_qless.clients import get_client

        return get_client(self.alias).for_queue(self.queue)

    def get(self) -> Job | RecurringJob | None:
        """Fetch the job, or the recurring template, from Redis (None if there is none)."""
        from django_qless.clients import get_client

        client = self.client
        jobs = client.jobs
        found: Job | RecurringJob | None = None
        if self.status != "recurring":
            found = jobs.get(self.jid)
        if found is None:
            # A handle rebuilt from a jid (``.handle(jid)``) may name a recurring template.
            found = jobs.recurring(self.jid)
        if found is None:
            # Not in its queue's shard: rebuilt with another queue than it was sent to, or
            # its queue moved since. Ask every shard (a sharded alias only).
            everywhere = get_client(self.alias)
            if everywhere is not client:
                found = everywhere.find_job(self.jid)
        return found

    def state(self) -> str | None:
        """Return the job's current state ("recurring" for a template), None if it is gone."""
        from django_qless.core.job import Job

        found = self.get()
        if found is None:
            return None
        return found.state if isinstance(found, Job) else "recurring"

    def cancel(self) -> bool:
        """Cancel the job, or stop a recurring one; return whether anything was there."""
        found = self.get()
        if found is None:
            return False
        found.cancel()
        return True

    def result(self, timeout: float | None = None) -> Any:
        """Return the job's return value; raise JobFailedError if it failed.

        Without ``timeout`` a job that has not finished raises ResultNotReady at once; with
        it, the call blocks until the job completes or fails, woken by the engine's events
        (no polling), and raises ResultTimeout after ``timeout`` seconds.
        """
        from django_qless.core.exceptions import JobNotFound
        from django_qless.core.job import Job
        from django_qless.core.waiting import FINISHED, WaitTimeout

        if self.status == "eager":
            return self._value
        if self.status == "recurring":
            raise ResultNotReady(f"job {self.jid} is recurring: its children have the results")
        found = self.get()
        job = found if isinstance(found, Job) else None
        if job is None:
            raise ResultNotReady(f"job {self.jid} does not exist (not sent yet, or expired)")
        if timeout is not None and job.state not in FINISHED:
            try:
                job = job.client.jobs.wait(self.jid, timeout)
            except WaitTimeout as exc:
                raise ResultTimeout(f"job {self.jid} did not finish within {timeout} s") from exc
            except JobNotFound as exc:
                raise ResultNotReady(f"job {self.jid} is gone (canceled or expired)") from exc
        if job.state == "failed":
            raise JobFailedError(self.jid, job.failure or {})
        if job.state != "complete":
            raise ResultNotReady(f"job {self.jid} is {job.state}")
        data = job.data
        return data.get(RESULT_KEY) if isinstance(data, dict) else None

    async def aresult(self, timeout: float | None = None) -> Any:
        """``result(timeout)`` for async code: the wait runs in a thread of its own."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.result, thread_sensitive=False)(timeout)


class PendingSend:
    """An enqueue waiting in a connection's on-commit list (``run_queued`` may send it)."""

    __slots__ = ("action", "describe")

    def __init__(self, action: Callable[[], None], describe: str) -> None:
        self.action = action
        self.describe = describe

    def __call__(self) -> None:
        """Send the job now."""
        try:
            self.action()
        except Exception:
            # The transaction is committed; the job is not. Say so loudly, with payload.
            log.exception("django_qless: enqueue after commit failed: %s", self.describe)
            raise


def dispatch(options: JobOptions, action: Callable[[], None], describe: str,
             handle: JobHandle | None = None) -> bool:
    """Run ``action`` now, or after the transaction commits; return True if it ran now."""
    mode = options.commit_mode or get_settings().commit_mode
    if mode == "on_commit" and transaction.get_connection(options.database).in_atomic_block:

        after_commit = PendingSend(action, describe)
        transaction.on_commit(after_commit, using=options.database)
        if handle is not None:
            handle._waiting = (options.database, after_commit)
        return False
    action()
    return True
