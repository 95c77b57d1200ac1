"""`ShardFollower`: the shards whose worker channels a worker must hear as its queues move."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["ShardFollower"]

log = logging.getLogger("django_qless.worker")


class Routes(Protocol):
    """Where a worker's queues live (the worker's `QueueRoutes`)."""

    @property
    def selection(self) -> Selection: ...

    def served(self) -> list[Client]: ...

    def by_shard(self) -> list[tuple[Client, list[str]]]: ...


class Selection(Protocol):
    @property
    def patterns(self) -> tuple[str, ...]: ...


class ShardFollower:
    """The shards served at start, and each a served queue moved to since, until none is
    there nor a job of `holders()` (the worker's names). With a pattern, every shard."""

    def __init__(self, routes: Routes, holders: Callable[[], Iterable[str]]) -> None:
        self.routes = routes
        self._at = 0.0
        self._holders = holders
        # A pattern may match a queue of any shard, now or later: every shard stays.
        self._every_shard = bool(routes.selection.patterns)
        self._followed = {c.shard: c for c in routes.served()}
        self._kept: set[str | None] = set()  # left by every queue, kept for our jobs there

    def clients(self) -> list[Client]:
        """Return every shard followed now (looking again when a second has passed)."""
        if (now := time.monotonic()) >= self._at:
            self._at = now + 1.0
            groups = self.routes.by_shard()
            for client, _ in groups:
                self._followed.setdefault(client.shard, client)
            if not self._every_shard:
                self._drop_left({client.shard for client, _ in groups})
        return list(self._followed.values())

    def _drop_left(self, serving: set[str | None]) -> None:
        """Drop the shards no served queue lives in, unless a job of ours is there (a job
        taken there before its queue moved away may still run: its notices come there)."""
        for shard, client in list(self._followed.items()):
            if shard in serving:
                self._kept.discard(shard)
            elif not client.workers.hold_jobs(self._holders()):
                del self._followed[shard]
                self._kept.discard(shard)
                log.info("no served queue in shard %s any more: no longer listening there",
                         shard)
            elif shard not in self._kept:
                self._kept.add(shard)
                log.info("no served queue in shard %s any more; listening there until our "
                         "jobs there end", shard)
