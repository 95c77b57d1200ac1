"""Which queues a worker serves, in which shard, and in what order.

Queues are given by name or by glob pattern (`images.*`); patterns are resolved against the
known queues now and then, and at once when a wake-up names a queue not seen yet. A reserver
orders them (ordered, round-robin, shuffled). A worker is given a `Client` (one server, or
one shard) or a `ShardedClient` (queues placed over the shards of a cluster); either way it
sees a list of shard clients: the queues are grouped by the shard holding them, and a
reserve attempt makes one engine call per shard, shards taken in the order of their first
queue in the reserver's order (docs/worker.md, "Serving queues in several shards").
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
           "known_queues", "make_reserver", "served_clients"]

log = logging.getLogger("django_qless.worker")

#: What a worker is given: one keyspace, or queues placed over a cluster's shards.
Deployment: TypeAlias = "Client | ShardedClient"


_GLOB = set("*?[")


def is_pattern(spec: str) -> bool:
    """Tell whether a queue spec is a glob pattern."""
    return any(ch in _GLOB for ch in spec)


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


_KINDS = ("ordered", "round-robin", "shuffled")


class Reserver:
    """Order the selected queues for each reserve call: as given, round-robin or shuffled."""

    def __init__(self, kind: str, selection: QueueSelection) -> None:
        if kind not in _KINDS:
            raise ValueError(f"unknown reserver {kind!r}: use one of {', '.join(_KINDS)}")
        self.kind = kind
        self.selection = selection
        self._start = 0

    def order(self) -> list[str]:
        """Return the queues to try, in order, for the next reserve."""
        names = self.selection.names()
        if self.kind == "shuffled":
            random.shuffle(names)
        elif self.kind == "round-robin" and names:  # every queue gets its turn first
            start = self._start % len(names)
            self._start = start + 1
            names = names[start:] + names[:start]
        return names


def make_reserver(kind: str, selection: QueueSelection) -> Reserver:
    """Return a reserver of the named kind."""
    return Reserver(kind, selection)


def served_clients(deployment: Deployment, specs: Sequence[str]) -> list[Client]:
    """Return the clients of the shards `specs` can take jobs from (a pattern: every shard).

    These are the shards whose worker channels (`w:<worker>`) a worker listens on, and it
    uses hand-offs only when there is one.
    """
    if isinstance(deployment, Client):
        return [deployment]
    if any(is_pattern(spec) for spec in specs):
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

    def names() -> list[str]:
        found: set[str] = set()
        for client in deployment.clients():
            found.update(client.queues.names())
        return sorted(found)

    return names


class QueueRoutes:
    """The selected queues with the client of the shard holding each (cached a while)."""

    def __init__(self, deployment: Deployment, selection: QueueSelection,
                 refresh: float = 10.0) -> None:
        self.deployment = deployment
        self.selection = selection
        self._refresh = refresh
        self._clients: dict[str, list[Client]] = {}
        self._expires = 0.0
        # Bumped when the queues or their shards change (subscribers compare it).
        self.version = 0
        self._seen: tuple[tuple[str, str | None], ...] = ()
        self._served: list[Client] | None = None

    def served(self) -> list[Client]:
        """Return the clients of every shard the queue specs can take jobs from."""
        if self._served is None:
            self._served = served_clients(self.deployment, self.selection.specs)
        return self._served

    @property
    def single(self) -> Client | None:
        """Return the client when every queue is in one keyspace (hand-offs work), else None
        (a `ShardedClient`: every queue named and placed in one shard, looked up at start)."""
        if isinstance(self.deployment, Client):
            return self.deployment
        served = self.served()
        return served[0] if len(served) == 1 else None

    def clients_of(self, queue: str) -> list[Client]:
        """Return the clients of the shards to reserve `queue` from: the one holding it, or
        while the queue is being moved, the source's and the target's (docs/scaling.md)."""
        deployment = self.deployment
        if isinstance(deployment, Client):
            return [deployment]
        now = time.monotonic()
        if now >= self._expires:
            # A queue may move to another shard (docs/scaling.md): look placements up again.
            self._clients = {}
            self._expires = now + self._refresh
        found = self._clients.get(queue)
        if found is None:
            found = self._clients[queue] = deployment.serving(queue)
        return found

    def plan(self, order: Sequence[str]) -> list[tuple[Client, list[str]]]:
        """Group `order` by shard: shards in the order of their first queue, each shard's
        queues in the order given."""
        groups: dict[int, tuple[Client, list[str]]] = {}
        for queue in order:
            for client in self.clients_of(queue):
                groups.setdefault(id(client), (client, []))[1].append(queue)
        return list(groups.values())

    def by_shard(self) -> list[tuple[Client, list[str]]]:
        """Return the selected queues grouped by shard, bumping `version` on a change."""
        groups = self.plan(self.selection.names())
        seen = tuple((q, c.shard) for c, queues in groups for q in queues)
        if seen != self._seen:
            self._seen = seen
            self.version += 1
        return groups


class ShardFollower:
    """The shards whose worker channels a worker must hear: those its queue specs named at
    start, plus every shard a served queue has moved to since (the jobs it takes there are
    canceled or lost there). A shard no served queue lives in any more (moved away) is
    dropped once none of `holders()` (the worker's names: a serial worker's, a
    supervisor's children's) holds a job there. With a queue pattern every shard is
    followed. Uses the placements the job loop reserves by (`QueueRoutes`), looked at again
    at most once a second."""

    def __init__(self, deployment: Deployment, specs: Sequence[str], refresh: float = 10.0,
                 every: float = 1.0, holders: Callable[[], Iterable[str]] = tuple) -> None:
        self.selection = QueueSelection(specs, known_queues(deployment), refresh=refresh)
        self.routes = QueueRoutes(deployment, self.selection, refresh=refresh)
        self._every = every
        self._at = 0.0
        self._version = -1
        self._holders = holders
        # A pattern may match a queue of any shard, now or later: every shard stays.
        self._every_shard = isinstance(deployment, Client) or any(map(is_pattern, specs))
        self._clients = {c.shard: c for c in self.routes.served()}
        self._kept: set[str | None] = set()  # left by every queue, kept for our jobs there

    def clients(self) -> list[Client]:
        """Return every shard followed now (looking again when a second has passed)."""
        now = time.monotonic()
        if now >= self._at:
            self._at = now + self._every
            groups = self.routes.by_shard()
            if self.routes.version != self._version:
                self._version = self.routes.version
                for client, _ in groups:
                    self._clients.setdefault(client.shard, client)
            if not self._every_shard:
                self._drop_left(groups)
        return list(self._clients.values())

    def _drop_left(self, groups: list[tuple[Client, list[str]]]) -> None:
        """Drop the shards no served queue lives in, unless a job of ours is there."""
        serving = {client.shard for client, _ in groups}
        for shard, client in list(self._clients.items()):
            if shard in serving:
                self._kept.discard(shard)
            elif not self._holds_jobs(client):
                del self._clients[shard]
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
        names = list(self._holders())
        if not names:
            return False
        keys = [client.keyspace.key(f"w:{name}:jobs") for name in names]

        def read(conn: Any) -> list[Any]:
            pipe = conn.pipeline(transaction=False)
            for key in keys:
                pipe.zcard(key)
            return list(pipe.execute())

        return any(int(n) for n in client.read(read))
