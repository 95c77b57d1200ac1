"""The jobs a worker holds but has not started, and the completions still in flight or kept.

While short jobs flow, a worker reserves ahead. When a job ends, its completion is sent
together with a reserve for the jobs after next (`complete.reserve`) and not waited for:
the worker reads the previous call's reply, which carries its next jobs, and runs one while
Redis completes the last. So Redis and the worker work at the same time. If a job runs long
instead, the heartbeat thread hands the jobs held ahead back (engine `release`: back to
waiting, no retry spent) so another worker can take them.

Several completions per call: a short job whose next job is expected short too keeps its
completion (`keep`), and a later job's call carries the kept ones with its own
(complete.reserve's paired form; how many and when: completions.py). Anything else flushes
the kept ones first (a job that runs long, a job that fails or is aborted, an empty hand, a
pause, a stop).

Every call about a job goes to the job's own client (`job.client`: its shard's, when the
worker serves several shards). Both the job thread and the heartbeat thread use this object;
one lock orders them.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING

from django_qless.core.deferred import DeferredCall
from django_qless.core.exceptions import (
    InvalidArgument,
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessError,
    ScriptError,
)
from django_qless.core.serialization import check_jid, check_worker
from django_qless.core.workers.joblog import log_job
from django_qless.core.workers.runner import Outcome, fail_refused_outcome

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job

__all__ = ["COMPLETE_REFUSED_GROUP", "JobsInHand", "Settled", "complete_alone", "complete_outcome",
           "complete_outcomes", "fail_refused", "refused_for_good", "release_job"]

log = logging.getLogger("django_qless.worker")

_Reply = tuple[str, "list[Job]", "float | None"]
_ManyReply = tuple["list[str | QlessError]", "list[Job]", "float | None"]
Settled = tuple["Job", Outcome]


# Completions refused for good: the job is failed at once, saying why.
# A job that returns with data the engine cannot store (over 1 MiB, not JSON) can never be
# completed. Treating that refusal like a lost lock would leave the job running until its lease
# expired and then run it again, until its retries ran out, with the reason only in the worker's
# log. So a completion refused for a reason other than a lost lock or a transport error fails
# the job straight away, with the data it was popped with (or last heartbeated), in failure group
# `django_qless.CompleteRefused` and a message naming the reason.
COMPLETE_REFUSED_GROUP = "django_qless.CompleteRefused"

# Error replies that say nothing about the call itself: out of memory, missing permissions.
# Failing the job would be refused the same way (or wrongly spend it on a transient state).
_TRANSIENT_PREFIXES = ("OOM ", "NOPERM ")


def refused_for_good(exc: QlessError) -> bool:
    """Tell whether a completion error means the call can never succeed as sent."""
    if isinstance(exc, InvalidArgument):  # bad data, caught client-side or by the engine
        return True
    return isinstance(exc, ScriptError) and not str(exc).startswith(_TRANSIENT_PREFIXES)


def fail_refused(job: Job, exc: QlessError) -> Outcome:
    """Fail `job` because its completion was refused with `exc`; LOST if that is refused too."""
    log_job(logging.ERROR, job, "job %s: completion refused, failing the job: %s", job.jid,
            exc)
    # The changes are what was refused: fail with the data as stored, which the engine took.
    job._drop_data_changes()
    message = (
        f"The worker could not complete this {job.klass_name} job: {exc}\n"
        f"The job's changes to its data were not saved.\nworker: {job.worker_name}"
    )
    try:
        job.fail(COMPLETE_REFUSED_GROUP, message)
    except QlessError as again:
        return fail_refused_outcome(job, again)
    return Outcome.FAILED


def release_job(client: Client, jid: str, worker: str) -> bool:
    """Put a job held by `worker` back to waiting, keeping everything, spending no retry.

    One engine call (`release`), so it cannot race a lock expiry. Returns False if the job
    is no longer running for that worker.
    """
    try:
        client.call("release", check_jid(jid), check_worker(worker))
    except (LostLockError, InvalidStateTransition, JobNotFound):
        return False
    log.info("job %s released back to waiting", jid)
    return True


def complete_outcome(job: Job, reply: Callable[[], _Reply]) -> tuple[Outcome, list[Job]]:
    """Get the reply of `job`'s complete+reserve: LOST (and no jobs) if the lock was lost,
    FAILED if the completion was refused for good (the job is failed, saying why)."""
    try:
        _, jobs, _ = reply()
    except (LostLockError, InvalidStateTransition, JobNotFound) as exc:
        log_job(logging.WARNING, job, "job %s: not completed, this worker lost its lease: %s",
                job.jid, exc)
        return Outcome.LOST, []
    except QlessError as exc:
        if refused_for_good(exc):
            return fail_refused(job, exc), []
        log_job(logging.ERROR, job, "job %s: could not be completed: %s", job.jid, exc)
        return Outcome.LOST, []
    return Outcome.COMPLETED, jobs


def complete_alone(job: Job) -> Outcome:
    """Complete `job` in a call of its own, reserving nothing; return its outcome."""
    outcome, _ = complete_outcome(
        job, lambda: job.client.complete_and_reserve(job, [job.queue_name], 0))
    return outcome


def complete_outcomes(
    jobs: Sequence[Job], reply: Callable[[], _ManyReply]
) -> tuple[list[Settled], list[Job]]:
    """Get each job's outcome from the reply of a paired complete+reserve (complete_outcome
    for each: a job reported lost is LOST). A call refused as a whole wrote nothing (a bad
    argument): each job is then completed alone."""
    try:
        results, more, _ = reply()
    except QlessError as exc:
        log.info("jobs %s: paired completion refused (%s); completing each alone",
                 " ".join(j.jid for j in jobs), exc)
        return [(job, complete_alone(job)) for job in jobs], []
    settled: list[Settled] = []
    for job, result in zip(jobs, results, strict=True):
        if isinstance(result, QlessError):
            outcome, _ = complete_outcome(job, _raiser(result))
        else:
            outcome = Outcome.COMPLETED
        settled.append((job, outcome))
    return settled, more


def _raiser(exc: QlessError) -> Callable[[], _Reply]:
    """A reply that raises `exc` (a job's own refusal within a paired reply)."""
    def reply() -> _Reply:
        raise exc
    return reply


class JobsInHand:
    """Jobs reserved ahead of time (FIFO) plus the complete+reserve calls in flight."""

    #: Completions sent and not read yet, at most (the job thread reads the older first).
    max_in_flight = 2

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        # (jobs completed, jobs it asked for, the call), oldest first.
        self._inflight: deque[
            tuple[tuple[Job, ...], int, DeferredCall[_Reply] | DeferredCall[_ManyReply]]
        ] = deque()
        self._coming = 0
        # Finished jobs (of one client) whose completions wait to ride with a later one's.
        self._kept: list[Job] = []
        self.paired = 0  # calls sent ahead that carried more than one completion
        self.carried = 0  # completions kept to ride with a later job's call
        self.sent_ahead = 0  # completions sent without waiting (a call may carry several)
        self.handed_back = 0  # jobs held ahead and released unstarted

    def __len__(self) -> int:
        return len(self._jobs)

    @property
    def in_flight(self) -> int:
        """Return how many completions were sent and their replies not read yet."""
        return len(self._inflight)

    @property
    def coming(self) -> int:
        """Return how many jobs the calls in flight asked for (they may bring fewer)."""
        return self._coming

    def add(self, jobs: Iterable[Job]) -> None:
        """Hold `jobs` (after the ones already held)."""
        with self._lock:
            self._jobs.extend(jobs)

    def put_back(self, job: Job) -> None:
        """Hold `job` again, first in line (it was taken but not started)."""
        with self._lock:
            self._jobs.appendleft(job)

    def take(self) -> Job | None:
        """Return the next held job, or None."""
        with self._lock:
            return self._jobs.popleft() if self._jobs else None

    @property
    def kept(self) -> list[Job]:
        """Return the jobs whose completions are kept for a later call (a copy)."""
        return list(self._kept)

    def next_klass(self) -> str | None:
        """Return the class name of the job that runs next, if one is held."""
        with self._lock:
            return self._jobs[0].klass_name if self._jobs else None

    def keep(self, jobs: Sequence[Job]) -> None:
        """Keep the completions of `jobs` for a later call (none may be kept already): the
        ones taken with take_kept, then one more."""
        with self._lock:
            if self._kept:
                raise RuntimeError("completions are kept already")
            self._kept = list(jobs)
            self.carried += 1

    def take_kept(self) -> list[Job]:
        """Return the kept jobs, no longer kept (whoever takes them completes them)."""
        with self._lock:
            jobs, self._kept = self._kept, []
            return jobs

    @staticmethod
    def complete_kept(jobs: Sequence[Job]) -> list[Settled]:
        """Complete `jobs` (kept, of one client) in one call reserving nothing; return
        their outcomes."""
        if not jobs:
            return []
        if len(jobs) == 1:
            return [(jobs[0], complete_alone(jobs[0]))]
        last = jobs[-1]
        settled, _ = complete_outcomes(
            jobs, lambda: last.client.complete_many_and_reserve(jobs, [last.queue_name], 0))
        return settled

    def flush_kept(self) -> list[Settled]:
        """Complete the kept jobs in a call of their own, if any; return their outcomes."""
        return self.complete_kept(self.take_kept())

    def send(self, jobs: Sequence[Job], queues: Sequence[str], count: int) -> None:
        """Send the completion of `jobs` (one, or several of the same shard), reserving
        `count` more, without waiting for the reply."""
        with self._lock:
            if len(self._inflight) >= self.max_in_flight:
                raise RuntimeError("too many completions in flight")
            last = jobs[-1]
            call: DeferredCall[_Reply] | DeferredCall[_ManyReply]
            if len(jobs) == 1:
                call = last.client.send_complete_and_reserve(last, queues, count)
            else:
                call = last.client.send_complete_many(jobs, queues, count)
                self.paired += 1
            self._inflight.append((tuple(jobs), count, call))
            self._coming += count
            self.sent_ahead += len(jobs)

    def settle(self) -> list[Settled] | None:
        """Read the oldest reply in flight (its jobs are held); None if none is in flight."""
        with self._lock:
            if not self._inflight:
                return None
            jobs, count, call = self._inflight.popleft()
            self._coming -= count
            if len(jobs) == 1:
                outcome, more = complete_outcome(jobs[0], call.result)  # type: ignore[arg-type]
                settled = [(jobs[0], outcome)]
            else:
                settled, more = complete_outcomes(jobs, call.result)  # type: ignore[arg-type]
            self._jobs.extend(more)
        return settled

    def settle_all(self) -> list[Settled]:
        """Read every reply in flight, oldest first."""
        settled: list[Settled] = []
        while (some := self.settle()) is not None:
            settled.extend(some)
        return settled

    def hand_back(self) -> list[Settled]:
        """Release every held job (after reading the replies in flight and completing the
        kept job); return the jobs settled."""
        settled = self.settle_all() + self.flush_kept()
        with self._lock:
            jobs = list(self._jobs)
            self._jobs.clear()
            for job in jobs:
                try:
                    if release_job(job.client, job.jid, self.worker):
                        self.handed_back += 1
                except QlessError as exc:
                    log.error("job %s: could not hand back (%s); its lease will expire",
                              job.jid, exc)
        return settled
