"""Which queues a worker serves, in which shard, and in what order.

Queues are named or matched by glob (`images.*`: resolved now and then, and at once when a
wake-up names a new queue), ordered by a reserver and grouped by the shard holding them: a
reserve makes one engine call per shard (docs/worker.md, "Serving queues in several shards").
"""

from __future__ import annotations

import fnmatch
import random
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.types import QlessClient

__all__ = ["QueueRoutes", "QueueSelection", "Reserver", "followed_shards", "is_pattern",
           "known_queues", "served_clients"]

Groups = list[tuple["Client", list[str]]]


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


def served_clients(deployment: QlessClient, specs: Sequence[str]) -> list[Client]:
    """Return the clients of the shards `specs` can take jobs from (a pattern: every shard)."""
    if any(map(is_pattern, specs)):
        return deployment.clients()
    found: dict[str | None, Client] = {}
    for spec in specs:
        client = deployment.for_queue(spec)
        found.setdefault(client.shard, client)
    return list(found.values())


def known_queues(deployment: QlessClient) -> Callable[[], list[str]]:
    """Return a function listing the queues known in every shard (patterns expand on it)."""
    return lambda: sorted({q for c in deployment.clients() for q in c.queues.names()})


def followed_shards(deployment: QlessClient, specs: Sequence[str], refresh: float,
                    holders: Callable[[], Iterable[str]]) -> Callable[[], list[Client]]:
    """Return a function naming the shards whose worker channels the worker must hear."""
    served = served_clients(deployment, specs)
    if len(deployment.clients()) == 1:
        return lambda: served
    # (Loaded only for a cluster: its queues may move between shards.)
    from django_qless.core.cluster.follow import ShardFollower

    return ShardFollower(QueueRoutes(deployment, QueueSelection(
        specs, known_queues(deployment), refresh=refresh), refresh=refresh), holders).clients


class QueueRoutes:
    """The selected queues with the client of the shard holding each (cached a while)."""

    def __init__(self, deployment: QlessClient, selection: QueueSelection,
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
