"""`client.workers` and `client.tags`: the small accessors hanging off a Client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .serialization import as_list, check_int, check_worker

if TYPE_CHECKING:
    from .client import Client

__all__ = ["Workers", "Tags"]


class Workers:
    """`client.workers`: worker names seen by the engine and the jobs they hold."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    @property
    def counts(self) -> list[dict[str, Any]]:
        """Return [{"name", "jobs", "stalled"}], most recently seen first."""
        return as_list(self._client.call_json("workers"))

    def __getitem__(self, name: str) -> dict[str, list[str]]:
        reply = self._client.call_json("workers", check_worker(name)) or {}
        return {"jobs": as_list(reply.get("jobs")), "stalled": as_list(reply.get("stalled"))}

    def deregister(self, *names: str) -> None:
        """Forget workers (their job sets stay until the locks expire)."""
        if names:
            self._client.call("worker.deregister", *(check_worker(n) for n in names))


class Tags:
    """`client.tags`: tag statistics."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def top(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return tags used by at least two jobs, most used first."""
        return as_list(self._client.call_json(
            "tag", "top", check_int("offset", offset, 0), check_int("count", count, 0, 500)
        ))
