"""Which queues a worker serves, in which shard, and in what order.

Queues are named or matched by glob (`images.*`: resolved now and then, and at once when a
wake-up names a new queue), ordered by a reserver and grouped by the shard holding them: a
reserve makes one engine call per shard (docs/worker.md, "Serving queues in several shards").
"""

from __future__ import annotations

import fnmatch
import logging
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from django_qless.core.client import Client

if TYPE_CHECKING:
    # (Imported only by a worker given a cluster: one server needs no shard module.)
    from django_qless.core.cluster.sharded import ShardedClient

__all__ = ["Deployment", "QueueRoutes", "QueueSelection", "Reserver", "ShardFollower", "is_pattern",
           "known_queues", "served_clients"]

log = logging.getLogger("django_qless.worker")

#: What a worker is given: one keyspace, or queues placed over a cluster's shards.
Deployment: TypeAlias = "Client | ShardedClient"
Groups = list[tuple[Client, list[str]]]


def is_pattern(spec: str) -> bool:
    """Tell whether a queue spec is a glob pattern."""
    return any(ch in "*?[" for ch in spec)


class QueueSelection:
    """Resolve queue names and glob patterns into an ordered list of queue names."""

    def __init__(self, specs: Sequence[str], list_queues: Callable[[], list[str]],
                 refresh: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.specs = tuple(specs)
        self.names_given = tuple(s for s in self.specs if not is_pattern(s))
        self.patterns = tuple(s for s in self.specs if is_pattern(s))
        self._list_queues = list_queues
        self._refresh = refresh
        self._clock = clock
        self._resolved: list[str] = list(self.names_given)
        self._next_refresh = 0.0

    def note_wake(self, queue: str) -> None:
        """React to a wake-up from `queue` (a new queue matching a pattern: refresh)."""
        if queue not in self._resolved and self.matches(queue):
            self._next_refresh = 0.0

    def matches(self, queue: str) -> bool:
        """Tell whether `queue` is selected by a name or a pattern."""
        return queue in self.names_given or any(fnmatch.fnmatchcase(queue, p)
                                                for p in self.patterns)

    def names(self) -> list[str]:
        """Return the selected queue names in spec order (patterns expand alphabetically)."""
        if self.patterns and (now := self._clock()) >= self._next_refresh:
            known = sorted(self._list_queues())
            self._resolved = list(dict.fromkeys(
                q for spec in self.specs
                for q in ([q for q in known if fnmatch.fnmatchcase(q, spec)]
                          if is_pattern(spec) else [spec])))
            self._next_refresh = now + self._refresh
        return list(self._resolved)


# How each reserver orders the queues, given the round's number.
_ORDERS: dict[str, Callable[[list[str], int], list[str]]] = {
    "ordered": lambda names, _: names,
    "round-robin": lambda names, start: names[start:] + names[:start],  # each first in turn
    "shuffled": lambda names, _: random.sample(names, len(names)),
}


class Reserver:
    """Order the selected queues for each reserve call: as given, round-robin or shuffled."""

    def __init__(self, kind: str, selection: QueueSelection) -> None:
        if kind not in _ORDERS:
            raise ValueError(f"unknown reserver {kind!r}: use one of {', '.join(_ORDERS)}")
        self._order = _ORDERS[kind]
        self.selection = selection
        self._round = 0

    def order(self) -> list[str]:
        """Return the queues to try, in order, for the next reserve."""
        names = self.selection.names()
        start = self._round % max(len(names), 1)
        self._round = start + 1
        return self._order(names, start)


def served_clients(deployment: Deployment, specs: Sequence[str]) -> list[Client]:
    """Return the clients of the shards `specs` can take jobs from (a pattern: every shard)."""
    if isinstance(deployment, Client):
        return [deployment]
    if any(map(is_pattern, specs)):
        return deployment.clients()
    found: dict[str | None, Client] = {}
    for spec in specs:
        client = deployment.for_queue(spec)
        found.setdefault(client.shard, client)
    return list(found.values())


def known_queues(deployment: Deployment) -> Callable[[], list[str]]:
    """Return a function listing the queues known in every shard (patterns expand on it)."""
    if isinstance(deployment, Client):
        return lambda: deployment.queues.names()  # (client.queues made when patterns expand)
    return lambda: sorted({q for c in deployment.clients() for q in c.queues.names()})


class QueueRoutes:
    """The selected queues with the client of the shard holding each (cached a while)."""

    def __init__(self, deployment: Deployment, selection: QueueSelection,
                 refresh: float = 10.0) -> None:
        self.deployment = deployment
        self.selection = selection
        self._refresh = refresh
        self._clients: dict[str, list[Client]] = {}
        self._expires = 0.0
        self.version = 0  # bumped when the queues or their shards change
        self._seen: tuple[tuple[str, str | None], ...] = ()
        self._served: list[Client] | None = None

    def served(self) -> list[Client]:
        """Return the clients of every shard the queue specs can take jobs from."""
        if self._served is None:
            self._served = served_clients(self.deployment, self.selection.specs)
        return self._served

    @property
    def single(self) -> Client | None:
        """Return the client when every queue is in one keyspace (hand-offs work), else None."""
        served = self.served()
        return served[0] if len(served) == 1 else None

    def clients_of(self, queue: str) -> list[Client]:
        """Return the clients of the shards to reserve `queue` from: the one holding it, or
        while the queue is being moved, the source's and the target's (docs/scaling.md)."""
        if isinstance(self.deployment, Client):
            return [self.deployment]
        if (now := time.monotonic()) >= self._expires:
            self._clients = {}  # a queue may have moved to another shard: look again
            self._expires = now + self._refresh
        if queue not in self._clients:
            self._clients[queue] = self.deployment.serving(queue)
        return self._clients[queue]

    def plan(self, order: Sequence[str]) -> Groups:
        """Group `order` by shard, shards in the order of their first queue."""
        groups: dict[int, tuple[Client, list[str]]] = {}
        for queue in order:
            for client in self.clients_of(queue):
                groups.setdefault(id(client), (client, []))[1].append(queue)
        return list(groups.values())

    def by_shard(self) -> Groups:
        """Return the selected queues grouped by shard, bumping `version` on a change."""
        groups = self.plan(self.selection.names())
        seen = tuple((q, c.shard) for c, queues in groups for q in queues)
        if seen != self._seen:
            self._seen = seen
            self.version += 1
        return groups


class ShardFollower(QueueRoutes):
    """The shards whose worker channels a worker must hear: those served at start, and each
    a served queue moved to since, until none is there nor a job of `holders()` (the
    worker's names). With a pattern, every shard."""

    def __init__(self, deployment: Deployment, specs: Sequence[str], refresh: float = 10.0,
                 holders: Callable[[], Iterable[str]] = tuple) -> None:
        selection = QueueSelection(specs, known_queues(deployment), refresh=refresh)
        super().__init__(deployment, selection, refresh=refresh)
        self._at = 0.0
        self._holders = holders
        # A pattern may match a queue of any shard, now or later: every shard stays.
        self._every_shard = any(map(is_pattern, specs))
        self._followed = {c.shard: c for c in self.served()}
        self._kept: set[str | None] = set()  # left by every queue, kept for our jobs there

    def clients(self) -> list[Client]:
        """Return every shard followed now (looking again when a second has passed)."""
        if (now := time.monotonic()) >= self._at:
            self._at = now + 1.0
            groups = self.by_shard()
            for client, _ in groups:
                self._followed.setdefault(client.shard, client)
            if not self._every_shard:
                self._drop_left({client.shard for client, _ in groups})
        return list(self._followed.values())

    def _drop_left(self, serving: set[str | None]) -> None:
        """Drop the shards no served queue lives in, unless a job of ours is there."""
        for shard, client in list(self._followed.items()):
            if shard in serving:
                self._kept.discard(shard)
            elif not self._holds_jobs(client):
                del self._followed[shard]
                self._kept.discard(shard)
                log.info("no served queue in shard %s any more: no longer listening there",
                         shard)
            elif shard not in self._kept:
                self._kept.add(shard)
                log.info("no served queue in shard %s any more; listening there until our "
                         "jobs there end", shard)

    def _holds_jobs(self, client: Client) -> bool:
        """Tell whether one of the worker's names holds a job in `client`'s shard (a job
        taken there before its queue moved away may still run: its notices come there)."""
        keys = [client.keyspace.key(f"w:{name}:jobs") for name in self._holders()]

        def read(conn: Any) -> list[Any]:
            pipe = conn.pipeline(transaction=False)
            for key in keys:
                pipe.zcard(key)
            return list(pipe.execute())

        return bool(keys) and any(int(n) for n in client.read(read))
