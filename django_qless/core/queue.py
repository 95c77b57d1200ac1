"""Queues: put, pop, peek, recur, pause, counts, and the per-state job listings."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

from .serialization import (
    MAX_INTERVAL,
    PRIORITY_MAX,
    PRIORITY_MIN,
    as_list,
    check_delay,
    check_depends,
    check_int,
    check_jid,
    check_klass,
    check_name,
    check_number,
    check_recurring_jid,
    check_tags,
    check_text,
    check_throttles,
    dumps,
    dumps_data,
    new_jid,
    num,
    put_options,
)

if TYPE_CHECKING:
    from .client import Client
    from .console.queue_admin import EmptyCursor, EmptyStep, QueueContents
    from .job import Job
    from .scheduling.ratelimit import RateLimit, RateLimitStatus
    from .throttle import Throttle, ThrottleInfo

__all__ = ["Queue", "QueueJobs", "QueueSettings"]

# Instrumentation installs its put middleware through this module (docs/observability.md):
# until it is loaded nothing is installed, and a put need not load it to find that out.
_INTEGRATIONS = f"{__package__}.integrations"

def with_throttled(counts: Any) -> dict[str, Any]:
    """Return a queue's counts with "throttled" present (the engine omits it when 0)."""
    out: dict[str, Any] = dict(counts) if isinstance(counts, Mapping) else {}
    out.setdefault("throttled", 0)
    return out


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """A queue's effective settings, read together."""

    heartbeat: int  # lock duration, seconds (the queue's own, else the global one)
    max_concurrency: int  # 0 = unlimited
    throttle: ThrottleInfo  # the queue's own throttle


class QueueJobs:
    """Jids of a queue by state (`queue.jobs.running()` ...), paged."""

    __slots__ = ("_queue",)

    def __init__(self, queue: Queue) -> None:
        self._queue = queue

    def _list(self, state: str, offset: int, count: int) -> list[str]:
        """Run `jobs <state> <queue> offset count`."""
        off = check_int("offset", offset, 0)
        cnt = check_int("count", count, 0, 500)
        return as_list(self._queue.client.call("jobs", state, self._queue.name, off, cnt))

    def running(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return jids whose lock is live, soonest expiry first."""
        return self._list("running", offset, count)

    def waiting(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return waiting jids in pop order."""
        return self._list("waiting", offset, count)

    def scheduled(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return delayed jids, soonest first."""
        return self._list("scheduled", offset, count)

    def stalled(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return jids whose lock expired."""
        return self._list("stalled", offset, count)

    def depends(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return jids waiting for dependencies."""
        return self._list("depends", offset, count)

    def recurring(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return the recurring jids of the queue, next run first."""
        return self._list("recurring", offset, count)

    def throttled(self, offset: int = 0, count: int = 25) -> list[str]:
        """Return jids waiting for a throttle."""
        return self._list("throttled", offset, count)


class Queue:
    """A named queue (queues exist implicitly; nothing is created here)."""

    __slots__ = ("client", "name", "jobs")

    def __init__(self, client: Client, name: str) -> None:
        self.client = client
        self.name = check_name("queue", name)
        self.jobs = QueueJobs(self)

    def __repr__(self) -> str:
        return f"<Queue {self.name}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Queue) and other.name == self.name and other.client is self.client

    def __hash__(self) -> int:
        return hash(self.name)

    # -- enqueue ----------------------------------------------------------------------------

    def put_args(
        self, klass: str | type, data: Mapping[str, Any], *, jid: str | None = None,
        priority: int = 0, tags: Iterable[str] = (), delay: float = 0, retries: int = 5,
        depends: Iterable[str] = (), throttles: Iterable[str] = (), depends_missing: str = "error",
    ) -> list[str]:
        """Validate one put and return its arguments after `now`."""
        if (jid is None and type(priority) is int and priority == 0 and type(retries) is int
                and retries == 5 and type(tags) is tuple and not tags
                and type(depends) is tuple and not depends
                and type(throttles) is tuple and not throttles and depends_missing == "error"):
            # A fresh jid names a new job, for which put's default options are the engine's
            # own defaults: send none (less to pack here and to parse in Redis; the same job).
            return [self.client.worker_name, self.name, new_jid(), check_klass(klass),
                    dumps_data(data), check_delay(delay)]
        jid = new_jid() if jid is None else check_jid(jid)
        # The default () needs no check; None tells put_options to send no throttles.
        no_throttles = type(throttles) is tuple and not throttles
        throttle_list = None if no_throttles else check_throttles(throttles)
        return [
            self.client.worker_name, self.name, jid, check_klass(klass), dumps_data(data),
            check_delay(delay),
            *put_options(priority=priority, tags=tags, retries=retries, depends=depends,
                         throttles=throttle_list or None, jid=jid,
                         depends_missing=depends_missing),
        ]

    def put(
        self, klass: str | type, data: Mapping[str, Any], *, jid: str | None = None,
        priority: int = 0, tags: Iterable[str] = (), delay: float = 0, retries: int = 5,
        depends: Iterable[str] = (), throttles: Iterable[str] = (), depends_missing: str = "error",
    ) -> str:
        """Put a job (new, or moving an existing jid here); return its jid.

        A dependency on a jid that does not exist raises DependencyError, unless
        `depends_missing="ignore"` (qless-core's behaviour: it is dropped). On a shard, a
        dependency or named throttle living in another shard is refused (InvalidArgument).
        """
        if _INTEGRATIONS in sys.modules:
            from . import integrations

            if integrations.put_middleware():
                # Installed instrumentation wraps the put and may add propagation headers to
                # the data.
                pending = integrations.PendingPut(self, check_klass(klass), jid or new_jid(),
                                                  data)
                return integrations.around_put(pending, lambda sent: self._put(
                    pending.klass, sent, jid=pending.jid, priority=priority, tags=tags,
                    delay=delay, retries=retries, depends=depends, throttles=throttles,
                    depends_missing=depends_missing))
        return self._put(klass, data, jid=jid, priority=priority, tags=tags, delay=delay,
                         retries=retries, depends=depends, throttles=throttles,
                         depends_missing=depends_missing)

    def _put(
        self, klass: str | type, data: Mapping[str, Any], *, jid: str | None,
        priority: int, tags: Iterable[str], delay: float, retries: int,
        depends: Iterable[str], throttles: Iterable[str], depends_missing: str,
    ) -> str:
        """Validate and send one put; return its jid."""
        if self.client.router is not None:
            # checked first: a bare string must be refused, not read as its characters
            depends, throttles = check_depends(depends), check_throttles(throttles)
            self.check_shard(depends, throttles)
        args = self.put_args(klass, data, jid=jid, priority=priority, tags=tags, delay=delay,
                              retries=retries, depends=depends, throttles=throttles,
                              depends_missing=depends_missing)
        result: str = self.client.call_text("put", args)  # (put_args gives text only)
        return result

    def check_shard(self, depends: Iterable[str], throttles: Iterable[str]) -> None:
        """Refuse dependencies and named throttles that live in another shard than this
        queue's (a client of a ShardedClient only; docs/scaling.md)."""
        from .routing import check_dependencies, check_throttle_homes

        deps = [check_jid(d) for d in depends]
        if deps:
            check_dependencies(self.client, self.name, deps)
        check_throttle_homes(self.client, self.name, check_throttles(throttles))

    def requeue(
        self, klass: str | type, data: Mapping[str, Any], *, jid: str,
        priority: int = 0, tags: Iterable[str] = (), delay: float = 0, retries: int = 5,
        depends: Iterable[str] = (), throttles: Iterable[str] = (), depends_missing: str = "error",
    ) -> str:
        """Like put, but the job must already exist (JobNotFound otherwise)."""
        args = self.put_args(klass, data, jid=jid, priority=priority, tags=tags, delay=delay,
                              retries=retries, depends=depends, throttles=throttles,
                              depends_missing=depends_missing)
        result: str = self.client.call("requeue", *args)
        return result

    def put_many(self, jobs: Sequence[Mapping[str, Any]]) -> list[str]:
        """Put many jobs, one engine call per chunk of 500; return their jids in order.

        Every job is validated before anything is sent, and each chunk is atomic: the engine
        checks all of its jobs before writing any, so a refused chunk wrote nothing. The
        chunks run in order, each only once the one before was put, so a refused chunk's
        error is raised with the chunks before it put and none after it. The jobs keep their
        order (FIFO among equal priorities). If the connection drops midway, earlier chunks
        may have been put: put again with the same jids (returned by `new_jid()` beforehand)
        to be safe, since re-putting a jid is idempotent.
        """
        from .put_many import put_many  # (loaded on first use: with its chain of calls)

        return put_many(self, jobs)

    def recur(
        self, klass: str | type, data: Mapping[str, Any], interval: float, *, offset: float = 0,
        jid: str | None = None, priority: int = 0, tags: Iterable[str] = (), retries: int = 5,
        backlog: int = 1, throttles: Iterable[str] = (),
    ) -> str:
        """Spawn a child job every `interval` seconds, first after `offset`; return the jid.

        After missed intervals (no worker popped the queue) at most `backlog` + 1 catch-up
        children are spawned; the default 1 avoids a burst after an outage. `backlog=0` means
        unlimited catch-up, as qless-core's own default. Calling it again for the same `jid`
        changes nothing when nothing differs, and otherwise updates the template and keeps
        its next run (`offset` places a new template only).
        """
        jid = new_jid() if jid is None else check_recurring_jid(jid)
        args = [
            self.name, jid, check_klass(klass), dumps_data(data), "interval",
            num(check_number("interval", interval, 1, MAX_INTERVAL)),
            num(check_number("offset", offset, 0, MAX_INTERVAL)),
            "priority", str(check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)),
            "tags", dumps(check_tags(tags)),
            "retries", str(check_int("retries", retries, 0, 1000)),
            "backlog", str(check_int("backlog", backlog, 0)),
        ]
        throttle_list = check_throttles(throttles)
        if throttle_list:
            args += ["throttles", dumps(throttle_list)]
            if self.client.router is not None:
                self.check_shard((), throttle_list)
        result: str = self.client.call("recur", *args)
        return result

    # -- dequeue ----------------------------------------------------------------------------

    @overload
    def pop(self, count: None = None) -> Job | None: ...
    @overload
    def pop(self, count: int) -> list[Job]: ...

    def pop(self, count: int | None = None) -> Job | None | list[Job]:
        """Take jobs for this client's worker: one Job (or None), or a list if count given."""
        from .job import Job

        n = 1 if count is None else check_int("count", count, 1, 1000)
        worker = self.client.worker_name
        reply = as_list(self.client.call_json("pop", self.name, worker, n))
        jobs = [Job(self.client, d, owner=worker) for d in reply]
        if count is None:
            return jobs[0] if jobs else None
        return jobs

    @overload
    def peek(self, count: None = None, offset: int = 0) -> Job | None: ...
    @overload
    def peek(self, count: int, offset: int = 0) -> list[Job]: ...

    def peek(self, count: int | None = None, offset: int = 0) -> Job | None | list[Job]:
        """Look at the next jobs without taking them."""
        from .job import Job

        n = 1 if count is None else check_int("count", count, 0, 500)
        off = check_int("offset", offset, 0)
        args: list[Any] = [self.name, n] + ([off] if off else [])
        jobs = [Job(self.client, d) for d in as_list(self.client.call_json("peek", *args))]
        if count is None:
            return jobs[0] if jobs else None
        return jobs

    # -- state ------------------------------------------------------------------------------

    def pause(self) -> None:
        """Stop handing out jobs from this queue."""
        self.client.call("pause", self.name)

    def unpause(self) -> None:
        """Resume handing out jobs."""
        self.client.call("unpause", self.name)

    @property
    def paused(self) -> bool:
        """Return whether the queue is paused."""
        key = self.client.keyspace.key("paused_queues")
        return bool(self.client.read(lambda r: r.sismember(key, self.name)))

    @property
    def counts(self) -> dict[str, Any]:
        """Return waiting/running/stalled/scheduled/depends/recurring/throttled counts."""
        return with_throttled(self.client.call_json("queues", self.name))

    @property
    def length(self) -> int:
        """Return running + waiting + scheduled jobs."""
        return int(self.client.call("length", self.name))

    def __len__(self) -> int:
        return self.length

    def stats(self, date: float | None = None) -> dict[str, Any]:
        """Return the day's wait/run statistics and failure counters."""
        when = self.client.now() if date is None else check_number("date", date, 0)
        reply: dict[str, Any] = self.client.call_json("stats", self.name, num(when))
        return reply

    def _config_int(self, key: str) -> int | None:
        """Read an integer config value, None if unset."""
        value = self.client.config.get(key)
        return None if value is None else int(value)

    @property
    def heartbeat(self) -> int:
        """Return the lock duration for this queue (`<q>-heartbeat`, else `heartbeat`)."""
        value = self._config_int(f"{self.name}-heartbeat")
        if value is None:
            value = self._config_int("heartbeat")
        return 60 if value is None else value

    @heartbeat.setter
    def heartbeat(self, seconds: int) -> None:
        self.client.config[f"{self.name}-heartbeat"] = seconds

    @property
    def max_concurrency(self) -> int:
        """Return the cap on running jobs in this queue (0 = unlimited)."""
        value = self._config_int(f"{self.name}-max-concurrency")
        return 0 if value is None else value

    @max_concurrency.setter
    def max_concurrency(self, count: int) -> None:
        self.client.config[f"{self.name}-max-concurrency"] = count

    def settings(self) -> QueueSettings:
        """Return heartbeat, max concurrency and the queue throttle in one round trip."""
        from .throttle import ThrottleInfo, queue_throttle_id

        tid = queue_throttle_id(self.name)
        config, throttle = self.client.pipeline_calls(
            [("config.get", ()), ("throttle.get", (tid,))]
        )
        options = json.loads(config) if config else {}
        heartbeat = options.get(f"{self.name}-heartbeat", options.get("heartbeat", 60))
        # Stored as text; the engine admits integers only, possibly written as "30.0".
        return QueueSettings(
            heartbeat=int(float(heartbeat)),
            max_concurrency=int(float(options.get(f"{self.name}-max-concurrency") or 0)),
            throttle=ThrottleInfo.from_reply(tid, throttle),
        )

    @property
    def throttle(self) -> Throttle:
        """Return the queue's own throttle (read it, or list its holders and waiters)."""
        from .throttle import Throttle, queue_throttle_id

        return Throttle(self.client, queue_throttle_id(self.name))

    def set_throttle(self, maximum: int) -> None:
        """Cap this queue's running jobs through its own throttle (0 = unlimited)."""
        self.client.call("queue.throttle.set", self.name, check_int("maximum", maximum, 0))

    def set_rate_limit(self, rate: str | RateLimit, *, key: str | None = None) -> RateLimit:
        """Start at most `rate` ("100/m") of this queue's jobs, one budget per `key` value."""
        return self.client.rate_limits.set("queue", self.name, rate, key=key)

    def rate_limit(self) -> RateLimitStatus | None:
        """Return this queue's rate limit and its use now (None: no limit)."""
        return self.client.rate_limits.get("queue", self.name)

    def clear_rate_limit(self) -> None:
        """Remove this queue's rate limit (jobs waiting for a window go back to work)."""
        self.client.rate_limits.delete("queue", self.name)

    def unfail(self, group: str, count: int = 25) -> int:
        """Move up to `count` of the oldest failed jobs of `group` into this queue."""
        check_text("group", group, 256)
        return int(self.client.call("unfail", self.name, group,
                                    check_int("count", count, 0, 500)))

    def empty(self, batch: int = 500, cursor: EmptyCursor | None = None) -> EmptyStep:
        """Cancel up to `batch` of the queue's jobs (and recurring templates, and its failed
        jobs); call again with the returned ``cursor`` until ``done``
        (core/console/queue_admin.py)."""
        from .console.queue_admin import empty_step

        return empty_step(self.client, self.name, batch=batch, cursor=cursor)

    def contents(self) -> QueueContents:
        """Count what `empty` would remove, by state (failed jobs read from their groups)."""
        from .console.queue_admin import count_contents

        return count_contents(self.client, self.name)

    def forget(self) -> None:
        """Hide the queue from the queue list (its jobs are untouched)."""
        self.client.call("queue.forget", self.name)
