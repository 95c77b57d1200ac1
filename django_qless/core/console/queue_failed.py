"""A queue's failed jobs: the engine indexes failures by group, not by queue, so they are
found by reading the groups (bounded) and each job's queue field (one pipeline a chunk)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..serialization import as_list, check_int, check_name

if TYPE_CHECKING:
    from ..client import Client

__all__ = ["SCAN", "FailedOfQueues", "failed_of_queues"]

SCAN = 10_000  # failure-group entries read at most
_CHUNK = 500


@dataclass
class FailedOfQueues:
    """Failed jobs by queue (jids newest first within each group, groups by name), and
    whether the reading stopped at the cap (the counts are then lower bounds)."""

    jids: dict[str, list[str]] = field(default_factory=dict)
    capped: bool = False

    def count(self, queue: str) -> int:
        """Return how many failed jobs of ``queue`` were found."""
        return len(self.jids.get(queue, ()))


def failed_of_queues(client: Client, queues: list[str] | None = None, *,
                     scan: int = SCAN) -> FailedOfQueues:
    """Read every failure group (at most ``scan`` entries) and sort its jids by queue
    (only ``queues``, when given)."""
    wanted = None if queues is None else {check_name("queue", q) for q in queues}
    budget = check_int("scan", scan, 1, 1_000_000)
    found = FailedOfQueues()
    for group in sorted(client.jobs.failed()):
        start = 0
        while True:
            if budget <= 0:
                found.capped = True
                return found
            chunk = min(_CHUNK, budget)
            reply = client.call_json("failed", group, start, chunk)
            jids = [str(j) for j in as_list(reply.get("jobs"))]
            budget -= len(jids)
            start += len(jids)
            homes = _queues_of(client, jids)
            for jid, queue in zip(jids, homes, strict=True):
                if queue is not None and (wanted is None or queue in wanted):
                    found.jids.setdefault(queue, []).append(jid)
            if len(jids) < chunk:
                break
    return found


def _queues_of(client: Client, jids: list[str]) -> list[str | None]:
    """Read the queue field of each job, in one pipeline."""
    if not jids:
        return []
    keys = [client.keyspace.key("j:" + jid) for jid in jids]

    def read(conn: Any) -> list[Any]:
        pipe = conn.pipeline(transaction=False)
        for key in keys:
            pipe.hget(key, "queue")
        result: list[Any] = pipe.execute()
        return result

    return [None if v is None else (v.decode() if isinstance(v, bytes) else str(v))
            for v in client.read(read)]
