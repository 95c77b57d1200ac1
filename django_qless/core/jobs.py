"""`client.jobs`: look jobs up by jid, tag, failure group, tracking and completion."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, overload

from redis.lock import Lock

from .exceptions import JobNotFound, LimitExceeded
from .job import Job
from .serialization import (
    MAX_LIST,
    as_list,
    check_int,
    check_jid,
    check_jids,
    check_name,
    check_number,
    check_text,
)

if TYPE_CHECKING:
    from .bulk import BulkResult
    from .client import Client
    from .recurring import RecurringJob

__all__ = ["FAILED_CHUNK", "Jobs"]

# Failed jids read per engine call while filtering a group.
FAILED_CHUNK = 250


class Jobs:
    """Job lookups, and canceling several jobs at once."""

    __slots__ = ("_client",)

    def __init__(self, client: Client) -> None:
        self._client = client

    def __getitem__(self, jid: str) -> Job:
        job = self.get(jid)
        if job is None:
            raise JobNotFound(f"Job {jid} does not exist")
        return job

    def get(self, jid: str) -> Job | None:
        """Return the job, or None if it does not exist."""
        reply = self._client.call_json("get", check_jid(jid))
        return None if reply is None else Job(self._client, reply)

    def wait(self, jid: str, timeout: float | None = None) -> Job:
        """Block until job `jid` is complete or failed and return it (waiting.wait_for):
        woken by the engine's events, WaitTimeout after `timeout` seconds."""
        from .waiting import wait_for

        return wait_for(self._client, jid, timeout)

    def get_many(self, *jids: str) -> list[Job]:
        """Return the jobs that exist among `jids` (in the engine's order)."""
        wanted = check_jids(jids, limit=len(jids) or 1)
        jobs: list[Job] = []
        for start in range(0, len(wanted), MAX_LIST):
            chunk = wanted[start:start + MAX_LIST]
            reply = self._client.call_json("multiget", *chunk)
            jobs.extend(Job(self._client, d) for d in as_list(reply))
        return jobs

    def tagged(self, tag: str, offset: int = 0, count: int = 25) -> dict[str, Any]:
        """Return {"total": n, "jobs": [jid, ...]} for a tag, oldest tagging first."""
        reply = self._client.call_json(
            "tag", "get", check_text("tag", tag, 64),
            check_int("offset", offset, 0), check_int("count", count, 0, 500),
        )
        return {"total": int(reply.get("total") or 0), "jobs": as_list(reply.get("jobs"))}

    def tracked(self) -> dict[str, Any]:
        """Return {"jobs": [Job, ...], "expired": [jid, ...]} for tracked jobs."""
        reply = self._client.call_json("track") or {}
        return {
            "jobs": [Job(self._client, d) for d in as_list(reply.get("jobs"))],
            "expired": as_list(reply.get("expired")),
        }

    @overload
    def failed(self) -> dict[str, int]: ...
    @overload
    def failed(self, group: str, start: int = 0, limit: int = 25) -> dict[str, Any]: ...

    def failed(
        self, group: str | None = None, start: int = 0, limit: int = 25
    ) -> dict[str, int] | dict[str, Any]:
        """Without a group: {group: count}. With one: {"total", "jobs": [Job, ...]}."""
        if group is None:
            counts = self._client.call_json("failed") or {}
            return {str(k): int(v) for k, v in counts.items()}
        reply = self._client.call_json(
            "failed", check_text("group", group, 256),
            check_int("start", start, 0), check_int("limit", limit, 0, 500),
        )
        jids = as_list(reply.get("jobs"))
        return {"total": int(reply.get("total") or 0),
                "jobs": self.get_many(*jids) if jids else []}

    def failed_newest(self, groups: list[str]) -> dict[str, Job]:
        """Return each group's most recent failed job, in two round trips for all groups."""
        wanted = [check_text("group", g, 256) for g in groups]
        if not wanted:
            return {}
        replies = self._client.pipeline_calls([("failed", (g, 0, 1)) for g in wanted])
        first: dict[str, str] = {}
        for group, reply in zip(wanted, replies, strict=True):
            jids = as_list(json.loads(reply).get("jobs")) if reply else []
            if jids:
                first[group] = str(jids[0])
        jobs = {job.jid: job for job in self.get_many(*first.values())} if first else {}
        return {g: jobs[jid] for g, jid in first.items() if jid in jobs}

    def failed_matching(
        self, group: str, *, queue: str | None = None, since: float | None = None,
        until: float | None = None, cursor: int = 0, count: int = 25, scan: int = 5000,
    ) -> dict[str, Any]:
        """Return a group's failures in ``queue`` that failed in [since, until), newest first.

        Reads the group from position ``cursor`` on, at most ``scan`` entries per call, and
        replies ``{"jobs": [Job, ...], "next": int | None, "total": int}``: pass ``next`` as
        the cursor of the following call (None: the group's end was reached); ``total``
        counts the whole group.
        """
        group = check_text("group", group, 256)
        if queue is not None:
            check_name("queue", queue)
        low = None if since is None else check_number("since", since, 0)
        high = None if until is None else check_number("until", until, 0)
        position = check_int("cursor", cursor, 0)
        count = check_int("count", count, 1, 500)
        budget = check_int("scan", scan, 1, 100_000)
        found: list[Job] = []
        total = 0
        while budget > 0:
            chunk = min(FAILED_CHUNK, budget)
            reply = self._client.call_json("failed", group, position, chunk)
            total = int(reply.get("total") or 0)
            jids = as_list(reply.get("jobs"))
            jobs = {job.jid: job for job in self.get_many(*jids)} if jids else {}
            for index, jid in enumerate(jids):
                job = jobs.get(jid)
                if job is None or (queue is not None and job.queue_name != queue):
                    continue
                when = float((job.failure or {}).get("when") or 0)
                if (low is not None and when < low) or (high is not None and when >= high):
                    continue
                found.append(job)
                if len(found) == count:
                    return {"jobs": found, "next": position + index + 1, "total": total}
            position += len(jids)
            budget -= len(jids)
            if len(jids) < chunk:
                return {"jobs": found, "next": None, "total": total}
        return {"jobs": found, "next": position, "total": total}

    def complete(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return completed jids, most recent first."""
        return as_list(self._client.call(
            "jobs", "complete", check_int("offset", offset, 0), check_int("count", count, 0, 500)
        ))

    def completed_per_interval(
        self, intervals: int = 60, seconds: float = 60.0, until: float | None = None
    ) -> list[int]:
        """Count jobs completed in each of the last `intervals` spans of `seconds`, oldest first.

        Span i covers (start, start + seconds]; only completions the engine still keeps
        (`jobs-history-count`) are counted. One round trip. Without `until`, the newest span
        also counts completions stamped after this client's now: the engine keeps a caller's
        time within a second of its own, so another client's clock may run a little ahead.
        """
        n = check_int("intervals", intervals, 1, 10_000)
        step = check_number("seconds", seconds, 0.001)
        end = self._client.now() if until is None else check_number("until", until, 0)

        completed = self._client.keyspace.key("completed")

        def count(r: Any) -> list[Any]:
            pipe = r.pipeline(transaction=False)
            for i in range(n, 0, -1):
                lo = end - i * step
                hi: float | str = "+inf" if i == 1 and until is None else lo + step
                pipe.zcount(completed, f"({lo}", hi)
            result: list[Any] = pipe.execute()
            return result

        return [int(c) for c in self._client.read(count)]

    def cancel(self, *jids: str) -> list[str]:
        """Cancel jobs in one engine call, all or none; return the canceled jids."""
        if not jids:
            return []
        wanted = check_jids(jids, limit=len(jids))
        return as_list(self._client.call("cancel", *wanted))

    def unique_lock(self, jid: str, *, timeout: float = 10.0, wait: float = 10.0) -> Lock:
        """Return a lock serialising producers of one jid (use it as a context manager).

        It expires after `timeout` seconds if its holder dies; entering it waits at most
        `wait` seconds and raises redis.exceptions.LockError after that.
        """
        key = self._client.keyspace.key(f"unique-lock:{check_jid(jid)}")
        lock: Lock = self._client.redis.lock(key, timeout=timeout, blocking_timeout=wait)
        return lock

    def dependents_closure(self, jid: str, limit: int = 500) -> list[str]:
        """Return every job that depends on `jid`, directly or transitively (nearest first)."""
        check_int("limit", limit, 1, MAX_LIST - 1)
        seen: dict[str, None] = {}
        level = list(self[jid].dependents)
        while level:
            fresh = [d for d in dict.fromkeys(level) if d != jid and d not in seen]
            seen.update(dict.fromkeys(fresh))
            if len(seen) > limit:
                raise LimitExceeded(f"more than {limit} jobs depend on {jid}")
            level = [d for job in self.get_many(*fresh) for d in job.dependents] if fresh else []
        return list(seen)

    def cancel_with_dependents(self, jid: str, limit: int = 500) -> list[str]:
        """Cancel a job and every job depending on it, in one engine call; return the jids.

        The engine refuses (DependencyError) if a new dependent appears in between.
        """
        jids = [check_jid(jid), *self.dependents_closure(jid, limit)]
        return as_list(self._client.call("cancel", *jids))

    def cancel_many(self, jids: Sequence[str]) -> BulkResult:
        """Cancel jobs in one engine call; jobs that others outside the set need are refused."""
        from . import bulk  # (loaded on first use: a worker needs none of it)

        return bulk.cancel_bulk(self._client, jids)

    def retry_many(self, jids: Sequence[str]) -> BulkResult:
        """Put failed jobs back into their own queues, in one round trip (at most 500)."""
        from . import bulk

        return bulk.run_bulk(self._client, jids, bulk.retry_plan)

    def move_many(self, jids: Sequence[str], queue: str,
                  states: Sequence[str] | None = None) -> BulkResult:
        """Move jobs (only those in ``states``, if given) to ``queue`` in one round trip."""
        from . import bulk

        return bulk.run_bulk(self._client, jids, bulk.move_plan(queue, states))

    def set_priority_many(self, jids: Sequence[str], priority: int,
                          states: Sequence[str] | None = None) -> BulkResult:
        """Set the priority of jobs (only those in ``states``, if given) in one round trip."""
        from . import bulk

        return bulk.run_bulk(self._client, jids, bulk.priority_plan(priority, states))

    def track_many(self, jids: Sequence[str], *, track: bool = True) -> BulkResult:
        """Track (or, with ``track=False``, untrack) jobs in one round trip."""
        from . import bulk

        return bulk.run_bulk(self._client, jids, bulk.track_plan(track))

    def recurring(self, jid: str) -> RecurringJob | None:
        """Return the recurring job template, or None."""
        reply = self._client.call_json("recur.get", check_jid(jid))
        from .recurring import RecurringJob

        return None if reply is None else RecurringJob(self._client, reply)
