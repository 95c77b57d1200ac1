"""The worker's hot path: reserve, complete-and-reserve, reap.

Held by a `Client` (its `reserve`, `complete_and_reserve`, ... delegate here), so the client
module stays about connections and calls; it uses only the client's public calls and its
channel's `defer`.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from .deferred import DeferredCall
from .exceptions import InvalidArgument, QlessConnectionError
from .job import Job
from .serialization import as_list, check_int, check_name, check_number, check_worker, num
from .worker_reply import decode_worker_reply

if TYPE_CHECKING:
    from .client import Client

__all__ = ["RESERVE_QUEUES_MAX", "WorkerCalls"]

# Queues one reserve may name (the engine refuses more).
RESERVE_QUEUES_MAX = 100


class WorkerCalls:
    """reserve / complete_and_reserve / reap for one client."""

    __slots__ = ("_client", "_checked_queues")

    def __init__(self, client: Client) -> None:
        self._client = client
        self._checked_queues: dict[tuple[str, ...], tuple[str, ...]] = {}

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
            if not 1 <= len(names) <= RESERVE_QUEUES_MAX:
                raise InvalidArgument(
                    f"queues must name 1 to {RESERVE_QUEUES_MAX} queues, got {len(names)}")
            if len(self._checked_queues) < 64:
                self._checked_queues[key] = names  # hashable: every entry is a valid name
        return [str(count), *names]

    def _jobs_and_wake(self, reply: dict[str, Any], worker: str) -> tuple[list[Job], float | None]:
        """Build Jobs from a decoded reserve reply; wake is None if jobs came or nothing is due."""
        jobs = [Job(self._client, d, owner=worker) for d in reply["jobs"]]
        wake = reply.get("wake")
        return jobs, (None if wake is None or wake < 0 else float(wake))

    def reserve(
        self, queues: Sequence[str], count: int = 1, worker: str | None = None,
        holding: Collection[str] = (), wait: float | None = None,
    ) -> tuple[list[Job], float | None]:
        """Pop up to `count` jobs from `queues` in order; also return seconds until due work.

        With `wait` (seconds), when nothing is ready the worker stays registered as idle that
        long: the next job ready in these queues is popped for it and published on
        `ql:hand:<worker>` (engine `reserve.wait`; the worker must listen there).
        After a lost reply, returns the jobs that call reserved (held by the worker, minus
        the jids in `holding`, the ones the caller is still working on) rather than more.
        """
        client = self._client
        name = client.worker_name if worker is None else check_worker(worker)
        args = self._reserve_args(queues, check_int("count", count, 1, 1000))
        command = "reserve"
        if wait is not None:
            if not 0 < check_number("wait", wait, 0, 3600):
                raise InvalidArgument(f"wait must be > 0, got {wait!r}")
            command = "reserve.wait"
            args = [num(wait), *args]
        try:
            reply = decode_worker_reply(client.call(command, name, *args))
        except QlessConnectionError:
            # The lost call may have run and handed `name` jobs it never heard of: take those
            # (running for `name`, not in `holding`) instead of popping more. None held: the
            # call popped nothing, so reserving again is safe. A second error is raised.
            orphans = [j for j in client.workers[name]["jobs"] if j not in holding]
            if not orphans:
                reply = decode_worker_reply(client.call(command, name, *args))
                return self._jobs_and_wake(reply, name)
            found = as_list(client.call_json("multiget", *orphans[:count]))
            return [Job(client, d, owner=name) for d in found if d.get("worker") == name], None
        return self._jobs_and_wake(reply, name)

    def handed_jobs(self, messages: Sequence[dict[str, Any]], worker: str) -> list[Job]:
        """Build the Jobs the engine handed `worker` (decoded `ql:hand:<worker>` messages)."""
        return [Job(self._client, d, owner=worker) for d in messages if d.get("worker") == worker]

    def complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> tuple[str, list[Job], float | None]:
        """Complete `job` and reserve the next jobs in one round trip."""
        args = self._complete_reserve_args(job, queues, count)
        return self._completed(job, self._client.call_replayable("complete.reserve", *args))

    def send_complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[str, list[Job], float | None]]:
        """Send `complete_and_reserve` now; its `result()` reads the reply later, once.

        Lets a worker run a job it already holds while Redis completes the previous one.
        """
        args = self._complete_reserve_args(job, queues, count)
        pending = self._client.channel.defer(("complete.reserve", repr(self._client.now()), *args))
        return DeferredCall(pending, lambda raw: self._completed(job, raw))

    def _complete_reserve_args(self, job: Job, queues: Sequence[str], count: int) -> list[str]:
        """Validate and encode the arguments of `complete.reserve` after the time."""
        return [job.jid, job._worker_arg(), job.queue_name, job._data_text(), job.attempt_token,
                *self._reserve_args(queues, check_int("count", count, 0, 1000))]

    def _completed(self, job: Job, raw: Any) -> tuple[str, list[Job], float | None]:
        """Decode a `complete.reserve` reply and mark `job` as no longer ours."""
        reply = decode_worker_reply(raw)
        worker = job._worker_arg()
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
        return [str(jid) for jid in self._client.call_json("reap", *names)]
