"""Recurring jobs (templates that spawn a child job every interval)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .exceptions import JobNotFound
from .serialization import (
    MAX_INTERVAL,
    PRIORITY_MAX,
    PRIORITY_MIN,
    as_list,
    check_int,
    check_klass,
    check_name,
    check_number,
    check_tags,
    dumps_data,
    loads,
    num,
)

if TYPE_CHECKING:
    from .client import Client

__all__ = ["RecurringJob"]


class RecurringJob:
    """A recurring job template; properties are the snapshot last read."""

    __slots__ = (
        "client", "jid", "_klass", "_queue", "_raw", "_priority", "_interval", "_retries",
        "_count", "_tags", "_backlog", "_throttles",
    )

    def __init__(self, client: Client, d: Mapping[str, Any]) -> None:
        self.client = client
        self.jid: str = d["jid"]
        self._fill(d)

    def _fill(self, d: Mapping[str, Any]) -> None:
        """Copy the fields of a `recur.get` reply."""
        self._klass: str = d["klass"]
        self._queue: str = d.get("queue") or ""
        data = d.get("data")
        self._raw: str = data if isinstance(data, str) else "{}"
        self._priority = int(d.get("priority") or 0)
        self._interval = float(d.get("interval") or 0)
        self._retries = int(d.get("retries") or 0)
        self._count = int(d.get("count") or 0)
        self._tags: tuple[str, ...] = tuple(as_list(d.get("tags")))
        self._backlog = int(d.get("backlog") or 0)
        self._throttles: tuple[str, ...] = tuple(as_list(d.get("throttles")))

    def __repr__(self) -> str:
        every = f"every {self._interval:g}s"
        return f"<RecurringJob {self._klass} {self.jid} {every} in {self._queue!r}>"

    @property
    def klass_name(self) -> str:
        """Return the class name children get."""
        return self._klass

    @property
    def queue_name(self) -> str:
        """Return the queue children are put into."""
        return self._queue

    @property
    def raw_data(self) -> str:
        """Return the children's data as JSON text."""
        return self._raw

    @property
    def data(self) -> Any:
        """Return the children's data, decoded."""
        return loads(self._raw)

    @property
    def priority(self) -> int:
        """Return the children's priority."""
        return self._priority

    @property
    def interval(self) -> float:
        """Return the seconds between spawns."""
        return self._interval

    @property
    def retries(self) -> int:
        """Return the children's retry budget."""
        return self._retries

    @property
    def count(self) -> int:
        """Return how many children were spawned so far."""
        return self._count

    @property
    def tags(self) -> tuple[str, ...]:
        """Return the children's tags."""
        return self._tags

    @property
    def backlog(self) -> int:
        """Return how many missed intervals are caught up at most (0: all)."""
        return self._backlog

    @property
    def throttles(self) -> tuple[str, ...]:
        """Return the children's throttles."""
        return self._throttles

    @property
    def next_run(self) -> float | None:
        """Return when the next child is due (epoch seconds), None if unscheduled."""
        key = self.client.keyspace.key(f"q:{self._queue}-recur")
        score = self.client.read(lambda r: r.zscore(key, self.jid))
        return None if score is None else float(score)

    def update(
        self, *, priority: int | None = None, interval: float | None = None,
        retries: int | None = None, data: Mapping[str, Any] | None = None,
        klass: str | type | None = None, queue: str | None = None, backlog: int | None = None,
    ) -> None:
        """Change attributes of the template (children already spawned keep theirs)."""
        pairs: list[str] = []
        if priority is not None:
            pairs += ["priority", str(check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX))]
        if interval is not None:
            pairs += ["interval", num(check_number("interval", interval, 1, MAX_INTERVAL))]
        if retries is not None:
            pairs += ["retries", str(check_int("retries", retries, 0, 1000))]
        if data is not None:
            pairs += ["data", dumps_data(data)]
        if klass is not None:
            pairs += ["klass", check_klass(klass)]
        if queue is not None:
            pairs += ["queue", check_name("queue", queue)]
        if backlog is not None:
            pairs += ["backlog", str(check_int("backlog", backlog, 0))]
        if not pairs:
            return
        self.client.call("recur.update", self.jid, *pairs)
        self.refresh()

    def tag(self, *tags: str) -> tuple[str, ...]:
        """Add tags given to future children; return the template's tags."""
        self._tags = tuple(as_list(self.client.call_json("recur.tag", self.jid,
                                                          *check_tags(tags))))
        return self._tags

    def untag(self, *tags: str) -> tuple[str, ...]:
        """Remove tags from the template; return the remaining tags."""
        self._tags = tuple(as_list(self.client.call_json("recur.untag", self.jid,
                                                          *check_tags(tags))))
        return self._tags

    def cancel(self) -> None:
        """Stop spawning children (spawned ones are unaffected)."""
        self.client.call("unrecur", self.jid)

    def refresh(self) -> RecurringJob:
        """Re-read the template (JobNotFound if it is gone)."""
        reply = self.client.call_json("recur.get", self.jid)
        if reply is None:
            raise JobNotFound(f"Recurring job {self.jid} does not exist")
        self._fill(reply)
        return self
