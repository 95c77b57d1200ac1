"""A job's snapshot: the fields the engine last reported, read through properties."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Self

from .exceptions import JobNotFound
from .serialization import as_list, dumps, loads

if TYPE_CHECKING:
    from .client import Client
    from .queue import Queue

__all__ = ["JobSnapshot"]


class JobSnapshot:
    """A job's fields as last read from the engine, as read-only properties."""

    __slots__ = (
        "client", "jid", "_klass", "_queue", "_raw", "_data", "_priority", "_tags", "_state",
        "_worker", "_expires", "_retries", "_remaining", "_history", "_dependents",
        "_dependencies", "_failure", "_tracked", "_throttles", "_spawned_from", "_owner",
        "_sandbox", "_token",
    )

    def __init__(self, client: Client, d: Mapping[str, Any], *, owner: str | None = None) -> None:
        self.client = client
        self.jid: str = d["jid"]
        self._owner = owner
        self._sandbox: Callable[[], str] | None = None
        self._token: str | None = None
        self._fill(d)

    @classmethod
    def from_dict(cls, client: Client, d: Mapping[str, Any], *, owner: str | None = None) -> Self:
        """Build a job from a decoded engine job object (full or lean)."""
        return cls(client, d, owner=owner)

    def _fill(self, d: Mapping[str, Any]) -> None:
        """Copy the fields of an engine job object into this snapshot."""
        self._klass: str = d["klass"]
        self._queue: str = d.get("queue") or ""
        data = d.get("data")
        self._raw: str = data if isinstance(data, str) else dumps(data or {})
        self._data: Any = None
        self._priority: int = int(d.get("priority") or 0)
        self._tags: tuple[str, ...] = tuple(as_list(d.get("tags")))
        self._state: str = d.get("state") or ""
        self._worker: str = d.get("worker") or ""
        self._expires: float = float(d.get("expires") or 0)
        self._retries: int = int(d.get("retries") or 0)
        self._remaining: int = int(d.get("remaining") or 0)
        history = d.get("history")
        self._history: list[dict[str, Any]] | None = None if history is None else as_list(history)
        deps = d.get("dependencies")
        self._dependencies: list[str] | None = None if deps is None else as_list(deps)
        dependents = d.get("dependents")
        self._dependents: list[str] | None = None if dependents is None else as_list(dependents)
        self._failure: dict[str, Any] | None = d.get("failure") or None
        self._tracked: bool = bool(d.get("tracked"))
        self._throttles: tuple[str, ...] = tuple(as_list(d.get("throttles")))
        self._spawned_from: str | None = d.get("spawned_from_jid") or None

    def __repr__(self) -> str:
        return f"<Job {self._klass} {self.jid} {self._state} in {self._queue!r}>"

    # -- read-only snapshot -------------------------------------------------------------

    @property
    def klass_name(self) -> str:
        """Return the job class name as stored."""
        return self._klass

    @property
    def queue_name(self) -> str:
        """Return the queue the job is in ("" once complete)."""
        return self._queue

    @property
    def queue(self) -> Queue:
        """Return the Queue object for the job's queue."""
        return self.client.queues[self._queue]

    @property
    def raw_data(self) -> str:
        """Return the job data as the JSON text stored in Redis."""
        return self._raw

    @property
    def data(self) -> Any:
        """Return the job data, decoded on first access (mutations are sent on complete)."""
        if self._data is None:
            self._data = loads(self._raw)
        return self._data

    @property
    def priority(self) -> int:
        """Return the priority (larger runs first)."""
        return self._priority

    @property
    def tags(self) -> tuple[str, ...]:
        """Return the job's tags."""
        return self._tags

    @property
    def state(self) -> str:
        """Return the state as last read."""
        return self._state

    @property
    def worker_name(self) -> str:
        """Return the worker holding the job ("" if none)."""
        return self._worker

    @property
    def expires_at(self) -> float:
        """Return the lock expiry (epoch seconds; 0 when not running)."""
        return self._expires

    @property
    def ttl(self) -> float:
        """Return the seconds left on the lock, by the server clock."""
        return self._expires - self.client.now()

    @property
    def retries(self) -> int:
        """Return the retries remaining."""
        return self._remaining

    @property
    def original_retries(self) -> int:
        """Return the retry budget the job was put with."""
        return self._retries

    @property
    def failure(self) -> dict[str, Any] | None:
        """Return the failure record (group, message, when, worker) or None."""
        return self._failure

    @property
    def tracked(self) -> bool:
        """Return whether the job is tracked."""
        return self._tracked

    @property
    def throttles(self) -> tuple[str, ...]:
        """Return the throttle ids the job must acquire."""
        return self._throttles

    @property
    def spawned_from(self) -> str | None:
        """Return the recurring job's jid this job was spawned from, if any."""
        return self._spawned_from

    def _load_extras(self) -> None:
        """Load history and dependency lists (jobs from reserve come without them)."""
        reply = self.client.call_json("get", self.jid)
        if reply is None:
            raise JobNotFound(f"Job {self.jid} does not exist")
        self._history = as_list(reply.get("history"))
        self._dependencies = as_list(reply.get("dependencies"))
        self._dependents = as_list(reply.get("dependents"))

    @property
    def history(self) -> list[dict[str, Any]]:
        """Return the history entries (loaded with `get` if not yet known)."""
        if self._history is None:
            self._load_extras()
        return self._history or []

    @property
    def dependencies(self) -> list[str]:
        """Return the jids this job waits for."""
        if self._dependencies is None:
            self._load_extras()
        return self._dependencies or []

    @property
    def dependents(self) -> list[str]:
        """Return the jids waiting for this job."""
        if self._dependents is None:
            self._load_extras()
        return self._dependents or []
