"""The worker's hot path on the client: reserve, complete-and-reserve, reap.

A mixin of `Client` (kept apart so the client module stays about connections and calls).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, cast

from .exceptions import InvalidArgument, QlessConnectionError
from .job import Job
from .serialization import as_list, check_int, check_name, check_worker

if TYPE_CHECKING:
    from .accessors import Workers
    from .client import Client

__all__ = ["WorkerCalls"]


class WorkerCalls:
    """reserve / complete_and_reserve / reap, mixed into Client."""

    _checked_queues: dict[tuple[str, ...], tuple[str, ...]]
    workers: Workers

    if TYPE_CHECKING:
        @property
        def worker_name(self) -> str: ...
        def call_json(self, command: str, *args: Any) -> Any: ...
        def call_replayable(self, command: str, *args: Any) -> Any: ...

    def _reserve_args(self, queues: Sequence[str], count: int) -> list[str]:
        """Validate the queue list and count of reserve/complete.reserve."""
        if isinstance(queues, str):
            queues = [queues]
        key = tuple(queues)
        try:
            names = self._checked_queues.get(key)
        except TypeError:  # an unhashable entry: check_name below refuses it
            names = None
        if names is None:
            # A worker sends the same list on every call: check it once.
            names = tuple(check_name("queue", q) for q in key)
            if not 1 <= len(names) <= 20:
                raise InvalidArgument(f"queues must name 1 to 20 queues, got {len(names)}")
            if len(self._checked_queues) < 64:
                self._checked_queues[key] = names  # hashable: every entry is a valid name
        return [str(count), *names]

    def _jobs_and_wake(self, reply: dict[str, Any], worker: str) -> tuple[list[Job], float | None]:
        """Build Jobs from a reserve reply; wake is None if jobs came or nothing is due."""
        jobs = [Job(cast("Client", self), d, owner=worker) for d in as_list(reply.get("jobs"))]
        wake = reply.get("wake")
        return jobs, (None if wake is None or wake < 0 else float(wake))

    def reserve(
        self, queues: Sequence[str], count: int = 1, worker: str | None = None,
        holding: Collection[str] = (),
    ) -> tuple[list[Job], float | None]:
        """Pop up to `count` jobs from `queues` in order; also return seconds until due work.

        After a lost reply, returns the jobs that call reserved (held by the worker, minus
        the jids in `holding`, the ones the caller is still working on) rather than more.
        """
        name = self.worker_name if worker is None else check_worker(worker)
        args = self._reserve_args(queues, check_int("count", count, 1, 1000))
        try:
            reply = self.call_json("reserve", name, *args)
        except QlessConnectionError:
            # The lost call may have run and handed `name` jobs it never heard of: take those
            # (running for `name`, not in `holding`) instead of popping more. None held: the
            # call popped nothing, so reserving again is safe. A second error is raised.
            orphans = [j for j in self.workers[name]["jobs"] if j not in holding]
            if not orphans:
                reply = self.call_json("reserve", name, *args)
                return self._jobs_and_wake(reply, name)
            found = as_list(self.call_json("multiget", *orphans[:count]))
            client = cast("Client", self)
            return [Job(client, d, owner=name) for d in found if d.get("worker") == name], None
        return self._jobs_and_wake(reply, name)

    def complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> tuple[str, list[Job], float | None]:
        """Complete `job` and reserve the next jobs in one round trip."""
        worker = job._worker_arg()
        args = self._reserve_args(queues, check_int("count", count, 0, 1000))
        reply = json.loads(self.call_replayable(
            "complete.reserve", job.jid, worker, job.queue_name, job._data_text(),
            job.attempt_token, *args,
        ))
        state = str(reply.get("state", "complete"))
        job._released(state, job.queue_name)
        jobs, wake = self._jobs_and_wake(reply, worker)
        return state, jobs, wake

    def reap(self, queues: Sequence[str] | None = None) -> list[str]:
        """Re-offer jobs whose lease expired in `queues` (all known queues if None).

        Does for idle queues what the next pop would: a courtesy notice first, then, after the
        grace period, the job goes back to waiting (a retry spent) or fails when none remain.
        Returns the jids moved to waiting or failed (at most 100 per queue per call).
        """
        if isinstance(queues, str):
            queues = [queues]
        names = [] if queues is None else [check_name("queue", q) for q in queues]
        return [str(jid) for jid in self.call_json("reap", *names)]
