"""`client.queues`: queues by name, the list of known queues, and reads batched over them."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from .queue import Queue, with_throttled
from .serialization import as_list, check_name, check_number, num

if TYPE_CHECKING:
    from .client import Client
    from .throttle import ThrottleInfo

__all__ = ["Queues"]


class Queues:
    """`client.queues`: queue objects by name, and the list of known queues."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getitem__(self, name: str) -> Queue:
        return Queue(self._client, name)

    @property
    def counts(self) -> list[dict[str, Any]]:
        """Return the counts of every known queue."""
        return [with_throttled(item) for item in as_list(self._client.call_json("queues"))]

    def names(self) -> list[str]:
        """Return the names of known queues, oldest first."""
        key = self._client.keyspace.key("queues")
        names = self._client.read(lambda r: r.zrange(key, 0, -1))
        return [str(name) for name in names]

    def stats_many(
        self, names: Iterable[str], date: float | None = None
    ) -> dict[str, dict[str, Any]]:
        """Return several queues' statistics for the day of `date` in one round trip."""
        wanted = [check_name("queue", name) for name in names]
        if not wanted:
            return {}
        when = self._client.now() if date is None else check_number("date", date, 0)
        replies = self._client.pipeline_calls([("stats", (name, num(when))) for name in wanted])
        return {name: (json.loads(reply) if reply else {})
                for name, reply in zip(wanted, replies, strict=True)}

    def throttles(self, names: Iterable[str] | None = None) -> dict[str, ThrottleInfo]:
        """Return queues' own throttles (every known queue by default) in one round trip."""
        wanted = self.names() if names is None else [check_name("queue", n) for n in names]
        infos = self._client.throttles.get_many(self[name].throttle.id for name in wanted)
        return dict(zip(wanted, infos, strict=True))
