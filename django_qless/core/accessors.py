"""`client.workers` and `client.tags`: the small accessors hanging off a Client."""

from __future__ import annotations

import json
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

    def hello(self, name: str, host: str, pid: int, queues: list[str]) -> None:
        """Record a starting worker's host, pid and queues (resets its done/failed counts)."""
        self._client.call("worker.hello", check_worker(name), host, check_int("pid", pid, 0),
                          json.dumps(list(queues)))

    def info(self, *names: str) -> list[dict[str, Any]]:
        """Return [{"name", "last_seen", "host", "pid", "queues", "started", "done", "failed"}].

        Without names: every worker the engine knows (at most 1000), most recently seen
        first. Fields a worker never reported (a stock qless worker) are None; counts are 0.
        """
        reply = as_list(self._client.call_json("worker.info", *(check_worker(n) for n in names)))
        return [_info_row(row) for row in reply if isinstance(row, dict)]

    def deregister(self, *names: str) -> None:
        """Forget workers (their job sets stay until the locks expire)."""
        if names:
            self._client.call("worker.deregister", *(check_worker(n) for n in names))


def _number(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _info_row(row: dict[str, Any]) -> dict[str, Any]:
    """Normalise one `worker.info` entry (missing or malformed fields become None)."""
    try:
        queues = json.loads(row.get("queues") or "[]")
    except ValueError:
        queues = []
    pid = _number(row.get("pid"))
    return {
        "name": str(row.get("name", "")),
        "last_seen": _number(row.get("last_seen")),
        "host": str(row["host"]) if row.get("host") else None,
        "pid": int(pid) if pid is not None else None,
        "queues": [str(q) for q in queues] if isinstance(queues, list) else [],
        "started": _number(row.get("started")),
        "done": int(_number(row.get("done")) or 0),
        "failed": int(_number(row.get("failed")) or 0),
    }


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
