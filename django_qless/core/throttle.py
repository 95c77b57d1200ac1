"""Throttles: a cap on how many jobs holding the same throttle id run at once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .serialization import as_list, check_int, check_jids, check_text

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Throttle", "Throttles"]


class Throttle:
    """One throttle id (a queue's own throttle is `ql:q:<queue>`)."""

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
