"""Listings over every shard of an alias, merged (for ``manage.py qless``).

Each function takes the alias's ``clients()``: one client for a single server (then it is a
plain call with the caller's offset and count, unchanged), one per shard otherwise. A page
over several shards asks each for its first ``offset + count`` entries and cuts the page
from their concatenation in shard order: exact, and cheap for the small pages of a CLI.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django_qless.core.client import Client

__all__ = ["complete", "config_values", "counts", "failed_groups", "failed_jobs", "tagged"]


def _page(clients: Sequence[Client], offset: int, count: int,
          read: Callable[[Client, int, int], tuple[list[Any], int | None]]
          ) -> tuple[list[Any], int | None]:
    """Return one page of a listing spread over `clients`, and the total when known."""
    if len(clients) == 1:
        return read(clients[0], offset, count)
    items: list[Any] = []
    total: int | None = 0
    for client in clients:
        found, size = read(client, 0, offset + count)
        items.extend(found)
        total = None if total is None or size is None else total + size
    return items[offset:offset + count], total


def tagged(clients: Sequence[Client], tag: str, offset: int, count: int) -> dict[str, Any]:
    """Return {"jobs": jids, "total": n} of the jobs tagged `tag` in every shard."""
    def read(client: Client, start: int, size: int) -> tuple[list[Any], int | None]:
        reply = client.jobs.tagged(tag, start, size)
        return list(reply["jobs"]), int(reply["total"])

    jids, total = _page(clients, offset, count, read)
    return {"jobs": jids, "total": total}


def failed_jobs(clients: Sequence[Client], group: str, offset: int, count: int
                ) -> dict[str, Any]:
    """Return {"jobs": [Job], "total": n} of failure group `group` in every shard."""
    def read(client: Client, start: int, size: int) -> tuple[list[Any], int | None]:
        reply = client.jobs.failed(group, start, size)
        return list(reply["jobs"]), int(reply["total"])

    jobs, total = _page(clients, offset, count, read)
    return {"jobs": jobs, "total": total}


def failed_groups(clients: Sequence[Client]) -> dict[str, int]:
    """Return failure group -> count, summed over every shard."""
    groups: dict[str, int] = {}
    for client in clients:
        for group, n in client.jobs.failed().items():
            groups[group] = groups.get(group, 0) + int(n)
    return groups


def complete(clients: Sequence[Client], offset: int, count: int) -> list[str]:
    """Return a page of completed jids from every shard."""
    jids, _ = _page(clients, offset, count,
                    lambda c, start, size: (list(c.jobs.complete(start, size)), None))
    return jids


def counts(clients: Sequence[Client]) -> list[dict[str, Any]]:
    """Return every queue's counts; on a sharded alias each also names its "shard"."""
    if len(clients) == 1:
        return list(clients[0].queues.counts)
    out = []
    for client in clients:
        for entry in client.queues.counts:
            out.append({**entry, "shard": client.shard})
    return out


def config_values(clients: Sequence[Client], read: Callable[[Client], Any]) -> Any:
    """Return what `read` gives on every shard: the value when all agree, else a mapping
    shard tag -> value (a per-shard setting changed on one shard only)."""
    values = [read(client) for client in clients]
    if all(v == values[0] for v in values[1:]):
        return values[0]
    return {str(client.shard): value for client, value in zip(clients, values, strict=True)}
