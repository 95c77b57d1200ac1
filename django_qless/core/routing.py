"""Across the shards of one deployment: what a shard's client asks the ShardedClient.

A `Client` of a shard made by `ShardedClient` holds it as `client.router` (None for a plain
single-keyspace client); this module names what the client may ask it, so `client.py`,
`job.py` and `queue.py` never import `sharded.py`. Also the checks a put runs against it:
a job's dependencies and its named throttles must live in the shard of the job's queue
(docs/scaling.md, "What works across shards"); and a job completed into a queue of another
shard (`complete_into`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .exceptions import InvalidArgument, JobExists
from .serialization import as_list, carry_options, check_delay, check_depends

if TYPE_CHECKING:
    from .client import Client
    from .job import Job

__all__ = ["Router", "check_dependencies", "check_throttle_homes", "complete_into"]


class Router(Protocol):
    """The deployment a shard's client belongs to."""

    def for_queue(self, queue: str) -> Client:
        """Return the client of `queue`'s shard."""
        ...

    def locate(self, jids: Sequence[str]) -> dict[str, str]:
        """Return the shard tag of each of `jids` found in any shard (absent: nowhere)."""
        ...

    def shard(self, shard: int | str) -> Client:
        """Return the client of shard `shard` (an index or a tag)."""
        ...

    def throttle_home(self, tid: str, shard: str) -> str:
        """Return the home shard of throttle `tid`, recording `shard` at its first use."""
        ...


def check_dependencies(client: Client, queue: str, jids: Iterable[str]) -> dict[str, str]:
    """Refuse dependencies of a job in `queue` (on `client`'s shard) that live in another
    shard; return the state of each one found in this shard (one multiget there; the other
    shards are asked only about jids this one lacks)."""
    wanted = list(jids)
    if not wanted:
        return {}
    states = {str(d["jid"]): str(d.get("state") or "")
              for d in as_list(client.call_json("multiget", *wanted))}
    missing = [jid for jid in wanted if jid not in states]
    router = client.router
    if missing and router is not None:
        elsewhere = {jid: tag for jid, tag in router.locate(missing).items()
                     if tag != client.shard}
        if elsewhere:
            jid, tag = next(iter(elsewhere.items()))
            raise InvalidArgument(
                f"dependency {jid} is in shard {tag}, but queue {queue!r} is in shard "
                f"{client.shard}: a job and the jobs it depends on must share a shard")
    return states


def check_throttle_homes(client: Client, queue: str, throttles: Iterable[str]) -> None:
    """Refuse named throttles whose home is another shard than `queue`'s (recording this
    shard as the home of a throttle used for the first time)."""
    router = client.router
    if router is None or client.shard is None:
        return
    for tid in throttles:
        home = router.throttle_home(tid, client.shard)
        if home != client.shard:
            raise InvalidArgument(
                f"throttle {tid!r} lives in shard {home}, but queue {queue!r} is in shard "
                f"{client.shard}: a throttle caps jobs of one shard (place the queue there, "
                f"or use a throttle per shard)")


def complete_into(
    job: Job, target: Client, next: str, delay: float | None, depends: Iterable[str] | None,
) -> str:
    """Put `job` into `next` on `target` (another shard) unless a live copy is there already,
    then complete it in its own shard; return the state it has in `next`."""
    deps = [] if depends is None else check_depends(depends, job.jid)
    states = check_dependencies(target, next, deps)
    check_throttle_homes(target, next, job._throttles)
    # A dependency found nowhere is dropped, as the same-shard complete drops it.
    kept = [d for d in deps if d in states]
    wait = 0.0 if delay is None else float(check_delay(delay))
    # The copy carries the job's history (read afresh: a log entry may have been added
    # since the pop) and the `done` entry the same-shard advance writes before its put;
    # its retry budget starts afresh, as there.
    job._load_extras()
    done = {"when": math.floor(job.client.now()), "what": "done"}
    try:
        target.call("put", *job.put_args(next, delay=wait, depends=kept),
                    "if-absent", "live", *carry_options([*job.history, done]))
    except JobExists:
        pass  # a repeat (a lost reply, a rerun after a crash): the copy there stays
    if job._tracked:
        target.track(job.jid)
    args = [job.jid, job._worker_arg(), job._queue, job._data_text(),
            "token", job.attempt_token]
    job.client.call_replayable("complete", *args)
    job._released("complete", "")
    if any(states[d] != "complete" for d in kept):
        return "depends"
    return "scheduled" if wait > 0 else "waiting"
