"""The public types a caller of the core passes around: a deployment's client, found jobs.

A deployment is one server (a ``Client``) or a Redis Cluster whose queues are spread over
shards (a ``ShardedClient``); both satisfy ``QlessClient``, so code that serves either (the
Django glue, a dashboard, a CLI) is typed with it and reaches a queue's own ``Client``
through ``for_queue``; queues and jobs are the core's ``Queue``, ``Job`` and ``RecurringJob``.
Importing this module loads none of the modules it names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, TypeAlias, runtime_checkable

if TYPE_CHECKING:
    from .client import Client
    from .job import Job
    from .recurring import RecurringJob
    from .scheduling.schedules import Schedules

__all__ = ["AnyJob", "QlessClient"]

#: What a look-up by jid finds: a job, or a recurring job's template.
AnyJob: TypeAlias = "Job | RecurringJob"


@runtime_checkable
class QlessClient(Protocol):
    """A deployment of qless: one server's ``Client``, or a ``ShardedClient``."""

    @property
    def schedules(self) -> Schedules:
        """Return the deployment's cron schedules."""

    @property
    def worker_name(self) -> str:
        """Return this process's worker name."""
        ...

    def clients(self) -> list[Client]:
        """Return one ``Client`` per keyspace (one per shard; a single server's: itself)."""
        ...

    def for_queue(self, queue: str) -> Client:
        """Return the ``Client`` of the keyspace holding `queue`."""
        ...

    def serving(self, queue: str) -> list[Client]:
        """Return the ``Client``s to take `queue`'s jobs from (two while it moves shards)."""
        ...

    def throttle_client(self, tid: str, *, queue: str | None = None) -> Client:
        """Return the ``Client`` of the keyspace holding throttle `tid`."""
        ...

    def find_job(self, jid: str) -> Job | RecurringJob | None:
        """Return the job or recurring job `jid` wherever it lives, or None."""
        ...

    def close(self) -> None:
        """Close the connections this client opened."""
        ...

    def disconnect(self) -> None:
        """Close idle connections; the client stays usable."""
        ...
