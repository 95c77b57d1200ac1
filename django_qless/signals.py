"""Django signals sent by django-qless, and ``JobEvent``, the one payload of its job signals.

Every signal here is sent with ``sender`` = the alias name. The job signals carry one keyword
argument, ``event``: a frozen ``JobEvent`` saying what happened to which job (the worker name
is in it). ``worker_started`` and ``worker_stopped`` carry ``worker`` (name and queues).

Sent in the process that runs the job: ``job_started``, ``job_finished`` (``event.outcome`` =
"completed" | "retried" | "failed" | "aborted"; "completed" means the job code returned and
the worker then completes the job), ``worker_started``, ``worker_stopped``.

Bridged from Redis pubsub by ``manage.py qless_events`` (at-most-once, advisory):
``job_put``, ``job_popped``, ``job_completed``, ``job_failed``, ``job_stalled``,
``job_canceled``, ``job_tracked``, ``job_untracked``, ``job_lock_lost``.
See docs/signals.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from django.dispatch import Signal

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job

__all__ = [
    "BRIDGED_SIGNALS",
    "JobEvent",
    "job_canceled",
    "job_completed",
    "job_failed",
    "job_finished",
    "job_lock_lost",
    "job_popped",
    "job_put",
    "job_stalled",
    "job_started",
    "job_tracked",
    "job_untracked",
    "worker_started",
    "worker_stopped",
]

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, kw_only=True)
class JobEvent:
    """What happened to one job: the ``event`` argument of every django-qless job signal."""

    #: "started" or "finished" in the worker; else the engine's event name ("put", "popped",
    #: "completed", "failed", "stalled", "canceled", "track", "untrack", "lock_lost").
    event: str
    jid: str
    #: The QLESS alias the job belongs to (also the signal's ``sender``).
    alias: str
    #: The job's class name (worker side; the engine's events do not carry it).
    klass: str | None = None
    queue: str | None = None
    #: The worker running the job (worker side), or the one the engine named (failed,
    #: lock_lost, canceled).
    worker: str | None = None
    #: Which run of the job this is, from 1 (worker side).
    attempt: int | None = None
    #: job_finished only: "completed", "retried", "failed" or "aborted".
    outcome: str | None = None
    #: job_finished only: what the job raised (None when it returned).
    error: BaseException | None = field(default=None, compare=False)
    #: The failure group and message (a failed job, on either side).
    group: str | None = None
    message: str | None = None
    #: The shard's tag when the alias shards its queues over a Redis Cluster (bridged).
    shard: str | None = None
    #: The payload the engine published, read-only (bridged; empty on the worker side).
    payload: Mapping[str, Any] = field(default_factory=lambda: _EMPTY, repr=False,
                                       compare=False)
    #: The running job (worker side): its data, tags, priority, client.
    job: Job | None = field(default=None, repr=False, compare=False)
    #: The client of the keyspace the job lives in (the shard's on a sharded alias).
    client: Client | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_job(cls, event: str, job: Job, alias: str, *, outcome: str | None = None,
                 error: BaseException | None = None) -> JobEvent:
        """Describe a job the worker runs (``event``: "started" or "finished")."""
        group = message = None
        if outcome == "failed" and error is not None:
            from django_qless.core.workers.runner import error_group

            group, message = error_group(error), str(error)
        return cls(event=event, jid=job.jid, alias=alias, klass=job.klass_name,
                   queue=job.queue_name, worker=job.client.worker_name,
                   attempt=max(1, job.original_retries - job.retries + 1), outcome=outcome,
                   error=error, group=group, message=message, shard=job.client.shard,
                   job=job, client=job.client)

    @classmethod
    def from_payload(cls, payload: Mapping[str, Any], alias: str,
                     client: Client | None = None) -> JobEvent:
        """Describe an event the engine published (``payload``: its decoded JSON)."""
        def text(key: str) -> str | None:
            value = payload.get(key)
            return str(value) if value not in (None, "", False) else None

        return cls(event=str(payload.get("event", "")), jid=str(payload.get("jid", "")),
                   alias=alias, queue=text("queue"), worker=text("worker"),
                   group=text("group"), message=text("message"),
                   shard=client.shard if client is not None else None,
                   payload=MappingProxyType(dict(payload)), client=client)


job_put = Signal()
job_popped = Signal()
job_completed = Signal()
job_failed = Signal()
job_stalled = Signal()
job_canceled = Signal()
job_tracked = Signal()
job_untracked = Signal()
job_lock_lost = Signal()

job_started = Signal()
job_finished = Signal()
worker_started = Signal()
worker_stopped = Signal()

# Event name (the ``event`` key of a payload) -> signal.
BRIDGED_SIGNALS: dict[str, Signal] = {
    "put": job_put,
    "popped": job_popped,
    "completed": job_completed,
    "failed": job_failed,
    "stalled": job_stalled,
    "canceled": job_canceled,
    "track": job_tracked,
    "untrack": job_untracked,
    "lock_lost": job_lock_lost,
}
