"""A job: its snapshot (job_snapshot.py) and the explicit methods that talk to Redis."""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from .exceptions import InvalidArgument, JobExists, JobNotFound
from .job_snapshot import JobSnapshot
from .serialization import (
    PRIORITY_MAX,
    PRIORITY_MIN,
    as_list,
    carry_options,
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

__all__ = ["Job"]


class Job(JobSnapshot):
    """One job. Properties are the snapshot last read; methods talk to Redis."""

    __slots__ = ()

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
                    return self._complete_into(target, next, delay, depends)
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

    def _complete_into(
        self, target: Client, next: str, delay: float | None, depends: Iterable[str] | None,
    ) -> str:
        """Put this job into `next` on `target` (another shard) unless a live copy is there
        already, then complete it here; return the state it has in `next`."""
        from .routing import check_dependencies, check_throttle_homes  # (sharded only)

        deps = [] if depends is None else check_depends(depends, self.jid)
        states = check_dependencies(target, next, deps)
        check_throttle_homes(target, next, self._throttles)
        # A dependency found nowhere is dropped, as the same-shard complete drops it.
        kept = [d for d in deps if d in states]
        wait = 0.0 if delay is None else float(check_delay(delay))
        # The copy carries the job's history (read afresh: a log entry may have been added
        # since the pop) and the `done` entry the same-shard advance writes before its put;
        # its retry budget starts afresh, as there.
        self._load_extras()
        done = {"when": math.floor(self.client.now()), "what": "done"}
        try:
            target.call("put", *self.put_args(next, delay=wait, depends=kept),
                        "if-absent", "live", *carry_options([*self.history, done]))
        except JobExists:
            pass  # a repeat (a lost reply, a rerun after a crash): the copy there stays
        if self._tracked:
            target.track(self.jid)
        args = [self.jid, self._worker_arg(), self._queue, self._data_text(),
                "token", self.attempt_token]
        self.client.call_replayable("complete", *args)
        self._released("complete", "")
        if any(states[d] != "complete" for d in kept):
            return "depends"
        return "scheduled" if wait > 0 else "waiting"

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

