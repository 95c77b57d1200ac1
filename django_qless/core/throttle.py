"""Throttles: a cap on how many jobs holding the same throttle id run at once."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .serialization import as_list, check_int, check_jids, check_text

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Throttle", "ThrottleInfo", "ThrottleStatus", "Throttles", "queue_throttle_id"]

# Holders and waiters of throttle <id> are the zsets th:<id>-locks and -pending (throttle.lua).
_SUFFIXES = ("-locks", "-pending")


def queue_throttle_id(queue: str) -> str:
    """Return the id of a queue's own throttle."""
    return f"ql:q:{queue}"  # an id, the same in every keyspace (not a key name)


@dataclass(frozen=True, slots=True)
class ThrottleInfo:
    """A throttle's definition as read from the engine."""

    id: str
    maximum: int  # 0 = unlimited
    ttl: int  # seconds left; -1 never expires, -2 not defined

    @property
    def defined(self) -> bool:
        """Return whether the throttle exists (a definition or a maximum is stored)."""
        return self.ttl != -2 or self.maximum > 0

    @classmethod
    def from_reply(cls, tid: str, reply: object) -> ThrottleInfo:
        """Build from a `throttle.get` reply (JSON text or a decoded dict)."""
        info: Any = reply
        if isinstance(info, str):
            try:
                info = json.loads(info)
            except ValueError:
                info = {}
        if not isinstance(info, dict):
            info = {}
        ttl = info.get("ttl")
        return cls(tid, int(info.get("maximum") or 0), int(ttl) if ttl is not None else -2)


@dataclass(frozen=True, slots=True)
class ThrottleStatus:
    """A throttle as listed: its definition and how many jobs hold and wait for it."""

    id: str
    maximum: int  # 0 = unlimited
    ttl: int  # seconds left; -1 never expires, -2 not defined (only holders or waiters)
    running: int  # jobs holding it
    pending: int  # jobs waiting for it

    @property
    def defined(self) -> bool:
        """Return whether a definition is stored (else only its holders or waiters are)."""
        return self.ttl != -2


def _throttle_id(key: str, kind: str, prefix: str) -> str | None:
    """Return the throttle id of a ``<prefix>`` key of type ``kind`` (None: not a throttle's)."""
    tid = key[len(prefix):] if key.startswith(prefix) else ""
    if kind == "zset":  # holders and waiters: the id is the key minus its suffix
        tid = next((tid[: -len(s)] for s in _SUFFIXES if tid.endswith(s)), "")
    return tid if 0 < len(tid) <= 128 else None


class Throttle:
    """One throttle id (a queue's own throttle is `queue_throttle_id(queue)`)."""

    __slots__ = ("client", "id")

    def __init__(self, client: Client, tid: str) -> None:
        self.client = client
        self.id = check_text("throttle id", tid, 128)

    def __repr__(self) -> str:
        return f"<Throttle {self.id}>"

    def info(self) -> dict[str, Any]:
        """Return {"id", "maximum", "ttl"} (maximum 0 and ttl -2 when unknown)."""
        reply: dict[str, Any] = self.client.call_json("throttle.get", self.id)
        return reply

    @property
    def maximum(self) -> int:
        """Return how many holders are allowed (0 = unlimited)."""
        return int(self.info().get("maximum") or 0)

    @property
    def ttl(self) -> int:
        """Return the seconds until the throttle definition expires (-1 never, -2 unknown)."""
        return int(self.info().get("ttl", -2))

    def set(self, maximum: int, ttl: int = 0) -> None:
        """Define the throttle: at most `maximum` holders; expire it after `ttl` s if > 0."""
        limit = check_int("maximum", maximum, 0)
        seconds = check_int("ttl", ttl, 0)
        self.client.call("throttle.set", self.id, limit, seconds)

    def delete(self) -> None:
        """Delete the definition (holders and waiters are left as they are)."""
        self.client.call("throttle.delete", self.id)

    def locks(self) -> list[str]:
        """Return the jids holding the throttle."""
        return as_list(self.client.call("throttle.locks", self.id))

    def pending(self) -> list[str]:
        """Return the jids waiting for the throttle."""
        return as_list(self.client.call("throttle.pending", self.id))

    def release(self, *jids: str) -> None:
        """Drop jids from the holders and waiters without moving their jobs."""
        if jids:
            self.client.call("throttle.release", self.id, *check_jids(jids))


class Throttles:
    """`client.throttles`: Throttle objects by id."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getitem__(self, tid: str) -> Throttle:
        return Throttle(self._client, tid)

    def get_many(self, tids: Iterable[str]) -> list[ThrottleInfo]:
        """Read several throttles' definitions in one round trip, in the order given."""
        wanted = [check_text("throttle id", tid, 128) for tid in tids]
        if not wanted:
            return []
        replies = self._client.pipeline_calls([("throttle.get", (tid,)) for tid in wanted])
        return [ThrottleInfo.from_reply(tid, reply)
                for tid, reply in zip(wanted, replies, strict=True)]

    def list(self, limit: int = 1000) -> list[ThrottleStatus]:
        """Return every throttle the engine knows (defined, held or waited for), by id.

        The engine keeps no index of throttles, so this SCANs their keys (a read, at most
        ``limit`` ids, then one pipelined round trip for their counts).
        """
        cap = check_int("limit", limit, 1, 100_000)
        keyspace = self._client.keyspace
        prefix, pattern = keyspace.key("th:"), keyspace.pattern("th:*")

        def scan(r: Any) -> list[str]:
            found: dict[str, None] = {}
            # Definitions are hashes, holders and waiters zsets: the type tells them apart
            # even for an id that itself ends in "-locks".
            for kind in ("hash", "zset"):
                for raw in r.scan_iter(match=pattern, count=500, _type=kind):
                    key = raw.decode() if isinstance(raw, bytes) else str(raw)
                    tid = _throttle_id(key, kind, prefix)
                    if tid is not None:
                        found[tid] = None
                    if len(found) >= cap:
                        return sorted(found)
            return sorted(found)

        tids = self._client.read(scan)
        if not tids:
            return []

        def counts(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for tid in tids:
                pipe.zcard(f"{prefix}{tid}-locks")
                pipe.zcard(f"{prefix}{tid}-pending")
            result: list[Any] = pipe.execute()
            return result

        sizes = self._client.read(counts)
        infos = self.get_many(tids)
        return [ThrottleStatus(info.id, info.maximum, info.ttl, int(sizes[2 * i]),
                               int(sizes[2 * i + 1]))
                for i, info in enumerate(infos)]
