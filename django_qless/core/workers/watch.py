"""Which children lost their job: told on `w:<child>`, or found in Redis after a pubsub gap.

An event (`lock_lost`, `canceled`, `put`) naming the job a child runs means the job is no
longer the child's: the supervisor kills the child (its result would be refused anyway).
After a gap (a broken connection, or the connections closed while the worker was idle)
Redis is asked instead, for each running child's attempt in the shard of its job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django_qless.core.accessors import REQUESTS
from django_qless.core.workers.channels import ABORT_EVENTS, attempts_still_owned

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.workers.shards import Deployment
    from django_qless.core.workers.supervision import ChildProc

__all__ = ["read_events", "taken_away"]


def read_events(
    events: Iterable[tuple[str, dict[str, Any]]], children: Iterable[ChildProc],
) -> tuple[list[str], list[tuple[ChildProc, str]]]:
    """Split events into console requests and (child, event) whose running job was taken."""
    by_name = {c.name: c for c in children}
    requests: list[str] = []
    lost: list[tuple[ChildProc, str]] = []
    for worker, payload in events:
        child = by_name.get(worker)
        event, jid = payload.get("event"), payload.get("jid")
        if child is None:
            continue
        if event in REQUESTS:
            requests.append(str(event))  # (a child's name stands for its whole worker)
        elif event in ABORT_EVENTS and isinstance(jid, str):
            if jid == child.jid:
                lost.append((child, str(event)))
            else:
                # Popped but not reported yet, or held ahead: when its start is reported,
                # Redis is asked whether this attempt still holds it.
                child.aborted.note(jid)
    return requests, lost


def taken_away(client: Deployment, children: Iterable[ChildProc]) -> list[tuple[ChildProc, str]]:
    """Return the (child, jid) whose running attempt Redis no longer gives to the child."""
    shards: dict[int, tuple[Client, list[tuple[ChildProc, str, str]]]] = {}
    for c in children:
        if c.jid is not None and c.kill_reason is None:
            shard = client.for_queue(c.queue or "")
            shards.setdefault(id(shard), (shard, []))[1].append((c, c.jid, c.token or ""))
    lost: list[tuple[ChildProc, str]] = []
    for shard, running in shards.values():
        owned = attempts_still_owned(shard, [(j, c.name, t) for c, j, t in running])
        lost += [(c, jid) for (c, jid, _), mine in zip(running, owned, strict=True) if not mine]
    return lost
