"""A job: the fields the engine last reported, and the explicit methods that talk to Redis."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Self

from .exceptions import InvalidArgument, JobNotFound
from .serialization import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    as_list,
    check_delay,
    check_depends,
    check_int,
    check_jids,
    check_name,
    check_tags,
    check_text,
    dumps,
    dumps_data,
    loads,
    put_options,
)

if TYPE_CHECKING:
    from .client import Client
    from .queue import Queue

__all__ = ["Job"]


class Job:
    """One job. Properties are the snapshot last read; methods talk to Redis."""

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

    @property
    def sandbox(self) -> str:
        """Return the job's private scratch directory (exists only while a worker runs it)."""
        if self._sandbox is None:
            raise RuntimeError(f"job {self.jid} has no sandbox: only a worker running it does")
        return self._sandbox()

    def bind_sandbox(self, getter: Callable[[], str] | None) -> None:
        """Give the job its sandbox (the worker calls this around each job)."""
        self._sandbox = getter

    # -- mutators -------------------------------------------------------------------------

    @property
    def attempt_token(self) -> str:
        """Return this attempt's token: complete/fail/retry send it, so the engine can
        recognise a call repeated after a lost reply and return what it recorded."""
        if self._token is None:
            self._token = os.urandom(8).hex()
        return self._token

    def _worker_arg(self) -> str:
        """Return the worker name to act as: the popper's, else the client's."""
        return self._owner or self.client.worker_name

    def _data_changed(self) -> bool:
        """Return whether the decoded data was modified since it was read."""
        return self._data is not None and self._data != loads(self._raw)

    def _data_text(self) -> str:
        """Return the data to send: the raw text unless the dict was changed."""
        if self._data_changed():
            self._raw = dumps_data(self._data)
        return self._raw

    def _drop_data_changes(self) -> None:
        """Forget changes made to the decoded data; the stored text is sent from now on."""
        self._data = None

    def _released(self, state: str, queue: str) -> None:
        """Record locally that the job is no longer held by anyone."""
        self._state = state
        self._queue = queue
        self._worker = ""
        self._expires = 0.0

    def complete(
        self, next: str | None = None, *, delay: float | None = None,
        depends: Iterable[str] | None = None,
    ) -> str:
        """Complete the job, or advance it to queue `next`; return the new state.

        On a shard, a `next` queue of another shard gets a copy of the job (put if absent
        there), then the job completes here (docs/scaling.md, "Completing into a queue of
        another shard").
        """
        args = [self.jid, self._worker_arg(), self._queue, self._data_text()]
        if next is not None:
            args += ["next", check_name("queue", next)]
            router = self.client.router
            if router is not None:
                target = router.for_queue(next)
                if target is not self.client:
                    from .routing import complete_into  # (sharded only)

                    return complete_into(self, target, next, delay, depends)
        elif delay is not None or depends is not None:
            raise InvalidArgument("delay and depends need next (the queue to advance to)")
        if delay is not None:
            args += ["delay", check_delay(delay)]
        if depends is not None:
            args += ["depends", dumps(check_depends(depends, self.jid))]
        args += ["token", self.attempt_token]
        state: str = self.client.call_replayable("complete", *args)
        # The queue is kept locally on a plain complete so a repeated call gets the
        # engine's "not currently running" refusal rather than a missing-argument error.
        self._released(state, next or self._queue)
        if next is None:
            self.open_gates()
        return state

    def open_gates(self) -> None:
        """Release the flow members of other shards that wait on this completed job (a
        flow across shards: flows/gates.py); nothing to do in one keyspace."""
        if self.client.router is not None:
            from .flows.gates import release_after

            release_after(self)

    def fail(self, group: str, message: str) -> str:
        """Fail the job into failure group `group`; return the jid."""
        check_text("group", group, 256)
        if not isinstance(message, str):
            raise InvalidArgument(f"message must be a string, got {type(message).__name__}")
        # Unchanged data is not sent: '' keeps what the engine stores.
        data = self._data_text() if self._data_changed() else ""
        args = [self.jid, self._worker_arg(), group, message, data, self.attempt_token]
        result: str = self.client.call_replayable("fail", *args)
        self._released("failed", self._queue)
        return result

    def retry(self, delay: float = 0, group: str | None = None, message: str | None = None,
              *, priority: int | None = None) -> int:
        """Give the job back, maybe at a new priority; return the retries left (< 0: failed)."""
        args = [self.jid, self._queue, self._worker_arg(), check_delay(delay), "", ""]
        extra = [] if priority is None else [str(check_int("priority", priority, PRIORITY_MIN,
                                                           PRIORITY_MAX))]
        if group is not None:
            args[4] = check_text("group", group, 256)
            if message is not None:
                args[5] = str(message)
        elif message is not None:
            raise InvalidArgument("message needs group")
        remaining = int(self.client.call_replayable("retry", *args, self.attempt_token, *extra))
        self._remaining = remaining
        if priority is not None and remaining >= 0:
            self._priority = priority
        state = "failed" if remaining < 0 else "scheduled" if float(args[3]) > 0 else "waiting"
        self._released(state, self._queue)
        return remaining

    def heartbeat(self) -> float:
        """Renew the lock; return the new expiry (epoch seconds)."""
        return self._heartbeat(self._data_changed())

    def _heartbeat(self, send_data: bool) -> float:
        """Renew the lock, sending the changed data along if `send_data`."""
        args = [self.jid, self._worker_arg()]
        if send_data:
            args.append(self._data_text())
        self._expires = float(self.client.call("heartbeat", *args))
        return self._expires

    def cancel(self) -> list[str]:
        """Cancel the job (refused if other jobs depend on it); return the jids canceled."""
        return as_list(self.client.call("cancel", self.jid))

    def _put(
        self, command: str, queue: str | None, delay: float, priority: int | None,
        tags: Iterable[str] | None, retries: int | None, depends: Iterable[str] | None,
        throttles: Iterable[str] | None,
    ) -> str:
        """Send put/requeue for this job, keeping every attribute not overridden."""
        target = check_name("queue", queue if queue is not None else self._queue)
        router = self.client.router
        if router is not None and router.for_queue(target) is not self.client:
            raise InvalidArgument(
                f"queue {target!r} is in shard {router.for_queue(target).shard}, job "
                f"{self.jid} in shard {self.client.shard}: a job changes shard only by "
                f"complete(next=...) or a queue move")
        result: str = self.client.call(command, *self.put_args(
            target, delay=delay, priority=priority, tags=tags, retries=retries, depends=depends,
            throttles=throttles))
        self._released("scheduled" if float(delay) > 0 else "waiting", target)
        return result

    def put_args(
        self, queue: str, *, delay: float = 0, priority: int | None = None,
        tags: Iterable[str] | None = None, retries: int | None = None,
        depends: Iterable[str] | None = None, throttles: Iterable[str] | None = None,
    ) -> tuple[str, ...]:
        """Return the arguments of the `put` that moves this job to `queue` (for batches)."""
        options = put_options(
            priority=self._priority if priority is None else priority,
            tags=self._tags if tags is None else tags,
            retries=self._retries if retries is None else retries,
            depends=depends, throttles=self._throttles if throttles is None else throttles,
            jid=self.jid,
        )
        return (self._worker_arg(), check_name("queue", queue), self.jid, self._klass,
                self._data_text(), check_delay(delay), *options)

    def move(
        self, queue: str, *, delay: float = 0, depends: Iterable[str] | None = None
    ) -> str:
        """Put the job into another queue keeping data, priority, tags, retries, throttles."""
        return self._put("put", queue, delay, None, None, None, depends, None)

    def requeue(
        self, queue: str | None = None, *, delay: float = 0, priority: int | None = None,
        tags: Iterable[str] | None = None, retries: int | None = None,
        depends: Iterable[str] | None = None, throttles: Iterable[str] | None = None,
    ) -> str:
        """Re-enqueue the existing job (JobNotFound if it is gone); return the jid."""
        return self._put("requeue", queue, delay, priority, tags, retries, depends, throttles)

    def set_priority(self, priority: int) -> int:
        """Change the priority; return it."""
        value = check_int("priority", priority, PRIORITY_MIN, PRIORITY_MAX)
        self._priority = int(self.client.call("priority", self.jid, str(value)))
        return self._priority

    def tag(self, *tags: str) -> tuple[str, ...]:
        """Add tags; return the job's tags."""
        self._tags = tuple(as_list(self.client.call_json("tag", "add", self.jid,
                                                          *check_tags(tags))))
        return self._tags

    def untag(self, *tags: str) -> tuple[str, ...]:
        """Remove tags; return the job's remaining tags."""
        self._tags = tuple(as_list(self.client.call_json("tag", "remove", self.jid,
                                                          *check_tags(tags))))
        return self._tags

    def track(self) -> None:
        """Start tracking the job (its events go to the jid-only channels)."""
        self.client.track(self.jid)
        self._tracked = True

    def untrack(self) -> None:
        """Stop tracking the job."""
        self.client.untrack(self.jid)
        self._tracked = False

    def depend(self, *jids: str) -> bool:
        """Add dependencies (the job must be in state depends)."""
        deps = check_depends(jids, self.jid)
        if not deps:
            raise InvalidArgument("depend needs at least one jid")
        if self.client.router is not None:
            from .routing import check_dependencies

            check_dependencies(self.client, self._queue, deps)
        self._dependencies = None
        return bool(self.client.call("depends", self.jid, "on", *deps))

    def undepend(self, *jids: str, all: bool = False) -> bool:  # noqa: A002 - documented API
        """Remove dependencies (or all of them); the job runs once none are left."""
        args = ["all"] if all else check_jids(jids)
        if not args:
            raise InvalidArgument("undepend needs at least one jid, or all=True")
        self._dependencies = None
        return bool(self.client.call("depends", self.jid, "off", *args))

    def timeout(self) -> None:
        """Take the lock away from its worker now (the job goes to the front as stalled)."""
        self.client.call("timeout", self.jid)
        self._state = "stalled"

    def log(self, message: str, data: Mapping[str, Any] | None = None) -> None:
        """Append an entry to the job's history."""
        args = [self.jid, check_text("message", message, 65536)]
        if data is not None:
            args.append(dumps_data(dict(data)))
        self.client.call("log", *args)
        self._history = None

    def refresh(self) -> Job:
        """Re-read every field from Redis (JobNotFound if the job is gone)."""
        reply = self.client.call_json("get", self.jid)
        if reply is None:
            raise JobNotFound(f"Job {self.jid} does not exist")
        self._fill(reply)
        return self

