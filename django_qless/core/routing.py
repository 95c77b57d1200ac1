"""Across the shards of one deployment: what a shard's client asks the ShardedClient.

A `Client` of a shard made by `ShardedClient` holds it as `client.router` (None for a plain
single-keyspace client); this module names what the client may ask it, so `client.py`,
`job.py` and `queue.py` never import `sharded.py`. Also the checks a put runs against it:
a job's dependencies and its named throttles must live in the shard of the job's queue
(docs/scaling.md, "What works across shards").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Protocol

from .exceptions import InvalidArgument
from .serialization import as_list

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Router", "check_dependencies", "check_throttle_homes"]


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
