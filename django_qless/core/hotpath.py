"""The worker's hot path: reserve, complete-and-reserve, reap.

Held by a `Client` (its `reserve`, `complete_and_reserve`, ... delegate here), so the client
module stays about connections and calls; it uses only the client's public calls and its
channel's `defer`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis

from .engine.worker_reply import decode_worker_reply
from .exceptions import InvalidArgument, QlessConnectionError, QlessError, error_from_reply
from .job import Job
from .serialization import as_list, check_int, check_name, check_number, check_worker, num

if TYPE_CHECKING:
    from .client import Client
    from .engine.channel import Pending
    from .engine.deferred import DeferredCall

__all__ = ["EARLIER_MAX", "RESERVE_QUEUES_MAX", "WorkerCalls"]

# Queues one reserve may name (the engine refuses more).
RESERVE_QUEUES_MAX = 100
# Completions one complete.reserve may carry before its own (the engine's Q.EARLIER_MAX).
EARLIER_MAX = 16
# Separates the per-job results in the state of a paired complete.reserve reply.
_RS = "\x1e"

# The engine's reply when it holds no list under the id sent (pop.lua, Q.queue_list).
_NOT_HELD = "is not held: send it with its queues"
# Misses in a row after which a client stops naming lists by id (an engine that keeps
# nothing across calls, e.g. a script-only proxy in front of Redis 7).
_MISSES_MAX = 3

T = TypeVar("T")


def list_id(names: Sequence[str]) -> str:
    """Return the id the engine holds a queue list under: a hash of the names, in order."""
    digest = hashlib.blake2b("\n".join(names).encode(), digest_size=12).hexdigest()
    return f"@{digest}"


class _Resending:
    """A deferred call's reply; on a list miss, the call again with the list's names."""

    __slots__ = ("_pending", "_resend")

    def __init__(self, pending: Pending, resend: Callable[[QlessError], Any]) -> None:
        self._pending = pending
        self._resend = resend

    def reply(self) -> Any:
        """Read the reply; after a miss, return the resent call's reply."""
        try:
            return self._pending.reply()
        except QlessError as exc:
            return self._resend(exc)


class WorkerCalls:
    """reserve / complete_and_reserve / reap for one client."""

    __slots__ = ("_client", "_checked_queues", "_ids", "_held", "_misses")

    def __init__(self, client: Client) -> None:
        self._client = client
        self._checked_queues: dict[tuple[str, ...], tuple[str, ...]] = {}
        # checked list -> list_id(list), or None when sent once
        self._ids: dict[tuple[str, ...], str | None] = {}
        # Ids of the lists this client sent with their names (the engine holds them, unless
        # it restarted, reloaded, failed over or keeps nothing across calls: then it says so).
        self._held: dict[str, tuple[str, ...]] = {}
        self._misses = 0  # list misses in a row

    def _checked(self, queues: Sequence[str]) -> tuple[str, ...]:
        """Validate a reserve's queue list (each distinct list once)."""
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
        return names

    def _queue_args(self, names: tuple[str, ...]) -> list[str]:
        """Encode a queue list: by id once the engine holds it, else with its names.

        Only where the engine keeps state across calls (a Redis 7 function); under EVALSHA
        every call would miss.
        """
        if len(names) < 2 or self._misses >= _MISSES_MAX or self._client.channel.mode == "script":
            return list(names)
        ident = self._ids.get(names)
        if ident is None:
            # The first time as names only: a list that changes on every call (the shuffled
            # reserver) is never hashed nor held; the second time with an id.
            if names not in self._ids:
                if len(self._ids) >= 64:
                    self._ids.clear()
                self._ids[names] = None
                return list(names)
            ident = self._ids[names] = list_id(names)
        if ident in self._held:
            return [ident]
        if len(self._held) >= 256:
            self._held.clear()
        self._held[ident] = names
        return [ident, *names]

    def _missed(self, exc: QlessError, args: Sequence[str]) -> list[str]:
        """Return `args` with the list's names after a list miss (else raise `exc`)."""
        ident = args[-1] if args else ""
        names = self._held.get(ident)
        if names is None or not ident.startswith("@") or _NOT_HELD not in str(exc):
            raise exc
        self._misses += 1
        return [*args, *names]

    def _call_list(self, call: Callable[[list[str]], T], args: list[str]) -> T:
        """Run `call(args)`; after a list miss, once more with the list's names."""
        try:
            result = call(args)
        except QlessError as exc:
            return call(self._missed(exc, args))
        if self._misses and len(args[-1]) > 1 and args[-1].startswith("@"):
            self._misses = 0  # a hit
        return result

    def _reserve_args(self, queues: Sequence[str], count: int) -> list[str]:
        """Validate and encode the queue list and count of reserve/complete.reserve."""
        names = self._checked(queues)
        # (complete.reserve with count 0 reads no list)
        return [str(count), *(self._queue_args(names) if count else names)]

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

        def call(argv: list[str]) -> Any:
            return decode_worker_reply(client.call(command, name, *argv))

        try:
            reply = self._call_list(call, args)
        except QlessConnectionError:
            # The lost call may have run and handed `name` jobs it never heard of: take those
            # (running for `name`, not in `holding`) instead of popping more. None held: the
            # call popped nothing, so reserving again is safe. A second error is raised.
            orphans = [j for j in client.workers[name]["jobs"] if j not in holding]
            if not orphans:
                reply = self._call_list(call, args)
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
        client = self._client
        raw = self._call_list(lambda argv: client.call_replayable("complete.reserve", *argv), args)
        return self._completed(job, raw)

    def send_complete_and_reserve(
        self, job: Job, queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[str, list[Job], float | None]]:
        """Send `complete_and_reserve` now; its `result()` reads the reply later, once.

        Lets a worker run a job it already holds while Redis completes the previous one.
        """
        from .engine.deferred import DeferredCall  # (loaded by the first job sent ahead)

        args = self._complete_reserve_args(job, queues, count)
        client = self._client
        pending = client.channel.defer(("complete.reserve", repr(client.now()), *args))

        def resend(exc: QlessError) -> Any:
            return client.call_replayable("complete.reserve", *self._missed(exc, args))

        return DeferredCall(_Resending(pending, resend), lambda raw: self._completed(job, raw))

    def complete_many_and_reserve(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> tuple[list[str | QlessError], list[Job], float | None]:
        """Complete `jobs` (all held by one worker) and reserve the next in one round trip.

        Returns each job's result in order: its new state, or the error that refused it
        (a job whose lock was lost meanwhile; the others are completed all the same). A bad
        argument refuses the whole call: raised, and nothing was written.
        """
        args = self._complete_many_args(jobs, queues, count)
        client = self._client
        raw = self._call_list(lambda argv: client.call_replayable("complete.reserve", *argv), args)
        return self._completed_many(jobs, raw)

    def send_complete_many(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int = 1
    ) -> DeferredCall[tuple[list[str | QlessError], list[Job], float | None]]:
        """Send `complete_many_and_reserve` now; its `result()` reads the reply later, once."""
        from .engine.deferred import DeferredCall

        args = self._complete_many_args(jobs, queues, count)
        client = self._client
        pending = client.channel.defer(("complete.reserve", repr(client.now()), *args))

        def resend(exc: QlessError) -> Any:
            # (a list held by id that the engine lost: refused before any write, sent again)
            return client.call_replayable("complete.reserve", *self._missed(exc, args))

        return DeferredCall(_Resending(pending, resend),
                            lambda raw: self._completed_many(jobs, raw))

    def _complete_many_args(
        self, jobs: Sequence[Job], queues: Sequence[str], count: int
    ) -> list[str]:
        """Encode complete.reserve's paired form: `+N`, the N earlier completions, the last."""
        if not 1 <= len(jobs) <= EARLIER_MAX + 1:
            raise InvalidArgument(f"complete 1 to {EARLIER_MAX + 1} jobs at once, got {len(jobs)}")
        *earlier, last = jobs
        args = self._complete_reserve_args(last, queues, count)
        if not earlier:
            return args
        worker = args[1]
        head = [f"+{len(earlier)}"]
        for job in earlier:
            if job._worker_arg() != worker:
                raise InvalidArgument(f"job {job.jid} is held by another worker than {worker}")
            head += [job.jid, job.queue_name, job._data_text(), job.attempt_token]
        return [*head, *args]

    def _completed_many(
        self, jobs: Sequence[Job], raw: Any
    ) -> tuple[list[str | QlessError], list[Job], float | None]:
        """Decode a paired `complete.reserve` reply; the completed jobs are no longer ours."""
        reply = self.decode_reply(raw)
        texts = str(reply.get("state", "complete")).split(_RS)
        if len(texts) != len(jobs):
            raise QlessError(f"complete.reserve answered {len(texts)} results for {len(jobs)} jobs")
        results: list[str | QlessError] = []
        for job, text in zip(jobs, texts, strict=True):
            if text.startswith("!"):
                results.append(error_from_reply(redis.ResponseError(text[1:])))
            else:
                job._released(text, job.queue_name)
                results.append(text)
        more, wake = self._jobs_and_wake(reply, jobs[-1]._worker_arg())
        return results, more, wake

    def _complete_reserve_args(self, job: Job, queues: Sequence[str], count: int) -> list[str]:
        """Validate and encode the arguments of `complete.reserve` after the time."""
        return [job.jid, job._worker_arg(), job.queue_name, job._data_text(), job.attempt_token,
                *self._reserve_args(queues, check_int("count", count, 0, 1000))]

    def _completed(self, job: Job, raw: Any) -> tuple[str, list[Job], float | None]:
        """Decode a `complete.reserve` reply and mark `job` as no longer ours."""
        reply = self.decode_reply(raw)
        worker = job._worker_arg()
        state = str(reply.get("state", "complete"))
        job._released(state, job.queue_name)
        jobs, wake = self._jobs_and_wake(reply, worker)
        return state, jobs, wake

    @staticmethod
    def decode_reply(raw: Any) -> dict[str, Any]:
        """Decode a `complete.reserve` reply (both forms): state, jobs, wake."""
        return decode_worker_reply(raw)

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
