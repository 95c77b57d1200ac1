"""The dashboard over every shard of an alias: which clients a page reads, the shard filter,
and where a queue or a job lives.

An alias gives one client (a single server) or a ShardedClient; both have `clients()`,
`find_job(jid)` and `for_queue(queue)`. Listings read every shard's client (or the one the
``?shard=`` filter names) and merge; a queue's pages use the client of its shard; a job's
page finds a bare jid in every shard and acts through the job's own client.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from django.http import HttpRequest

from django_qless.core.client import Client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.core.exceptions import JobNotFound
from django_qless.core.job import Job
from django_qless.core.types import QlessClient

__all__ = [
    "deployment",
    "find_job",
    "is_sharded",
    "merge_counts",
    "now",
    "page_clients",
    "queue_client",
    "shard_clients",
    "shard_context",
    "shard_filter",
    "shard_names",
]

T = TypeVar("T")


def deployment(request: HttpRequest) -> QlessClient:
    """Return the alias's client (``QLESS_UI['ALIAS']``): a Client or a ShardedClient."""
    from django_qless.clients import get_client
    from django_qless.views.base import ui_settings

    return get_client(str(ui_settings().get("ALIAS", "default")))


def shard_clients(request: HttpRequest) -> list[Client]:
    """Return every keyspace client of the alias (one on a single server)."""
    return list(deployment(request).clients())


def is_sharded(clients: Sequence[Client]) -> bool:
    """Tell whether these clients are the shards of a sharded deployment."""
    return len(clients) > 1 or (bool(clients) and clients[0].shard is not None)


def shard_names(request: HttpRequest) -> list[str]:
    """Return the alias's shard tags (empty on a single server)."""
    clients = shard_clients(request)
    return [str(c.shard) for c in clients] if is_sharded(clients) else []


def shard_filter(request: HttpRequest) -> str | None:
    """Return the shard ``?shard=`` names, when it is one of the alias's (else None)."""
    wanted = request.GET.get("shard", "")
    return wanted if wanted and wanted in shard_names(request) else None


def page_clients(request: HttpRequest) -> list[Client]:
    """Return the clients a listing reads: the filtered shard's, or every shard's."""
    clients = shard_clients(request)
    wanted = shard_filter(request)
    return [c for c in clients if c.shard == wanted] if wanted else clients


def now(request: HttpRequest) -> float:
    """Return the server time (one clock: the first shard's)."""
    return float(shard_clients(request)[0].now())


def queue_client(request: HttpRequest, queue: str) -> Client:
    """Return the client of the shard holding `queue` (no placement is recorded)."""
    dep = deployment(request)
    if isinstance(dep, ShardedClient):
        return dep.shard(dep.shard_of(queue))
    return dep.for_queue(queue)


def find_job(request: HttpRequest, jid: str) -> Job:
    """Return job `jid` from whichever shard holds it; raise JobNotFound (a 404) if none."""
    found = deployment(request).find_job(jid)
    if not isinstance(found, Job):
        raise JobNotFound(jid)
    return found


def merge_counts(parts: Iterable[dict[T, Any]]) -> dict[T, int]:
    """Sum mappings of counts (failure groups, tags) from several shards."""
    total: dict[T, int] = {}
    for part in parts:
        for key, value in (part or {}).items():
            total[key] = total.get(key, 0) + int(value or 0)
    return total


def shard_context(request: HttpRequest) -> dict[str, Any]:
    """Return what the page header needs: the shards, the filter, its query string."""
    try:
        names = shard_names(request)
    except Exception:  # noqa: BLE001 - the header must render even when Redis is down
        names = []
    wanted = request.GET.get("shard", "")
    current = wanted if wanted in names else ""
    return {"sharded": bool(names), "shards": names, "shard": current,
            "shard_query": f"?shard={current}" if current else ""}
