"""The jobs a worker holds but has not started, and the completions still in flight.

While short jobs flow, a worker reserves one job ahead. When a job ends, its completion is
sent together with a reserve for the job after next (`complete.reserve`) and not waited for:
the worker reads the previous call's reply, which carries its next job, and runs that job
while Redis completes the last one. So Redis and the worker work at the same time, and the
worker never holds more than one job beyond the one it runs. If a job runs long instead, the
heartbeat thread hands the job held ahead back (engine `release`: back to waiting, no retry
spent) so another worker can take it.

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
    InvalidStateTransition,
    JobNotFound,
    LostLockError,
    QlessError,
)
from django_qless.core.serialization import check_jid, check_worker
from django_qless.core.workers.refused import fail_refused, refused_for_good
from django_qless.core.workers.runner import Outcome

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job

__all__ = ["JobsInHand", "complete_outcome", "release_job"]

log = logging.getLogger("django_qless.worker")

_Reply = tuple[str, "list[Job]", "float | None"]


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
        log.warning("job %s: complete refused, lock lost: %s", job.jid, exc)
        return Outcome.LOST, []
    except QlessError as exc:
        if refused_for_good(exc):
            return fail_refused(job, exc), []
        log.error("job %s: complete failed: %s", job.jid, exc)
        return Outcome.LOST, []
    return Outcome.COMPLETED, jobs


class JobsInHand:
    """Jobs reserved ahead of time (FIFO) plus the complete+reserve calls in flight."""

    #: Completions sent and not read yet, at most (the job thread reads the older first).
    max_in_flight = 2

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        # (job completed, jobs it asked for, the call), oldest first.
        self._inflight: deque[tuple[Job, int, DeferredCall[_Reply]]] = deque()
        self._coming = 0
        self.sent_ahead = 0  # completions sent without waiting
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

    def send(self, job: Job, queues: Sequence[str], count: int) -> None:
        """Send `job`'s completion (reserving `count` more) without waiting for the reply."""
        with self._lock:
            if len(self._inflight) >= self.max_in_flight:
                raise RuntimeError("too many completions in flight")
            call = job.client.send_complete_and_reserve(job, queues, count)
            self._inflight.append((job, count, call))
            self._coming += count
            self.sent_ahead += 1

    def settle(self) -> tuple[Job, Outcome] | None:
        """Read the oldest reply in flight (its jobs are held); None if none is in flight."""
        with self._lock:
            if not self._inflight:
                return None
            job, count, call = self._inflight.popleft()
            self._coming -= count
            outcome, jobs = complete_outcome(job, call.result)
            self._jobs.extend(jobs)
        return job, outcome

    def settle_all(self) -> list[tuple[Job, Outcome]]:
        """Read every reply in flight, oldest first."""
        settled = []
        while (one := self.settle()) is not None:
            settled.append(one)
        return settled

    def hand_back(self) -> list[tuple[Job, Outcome]]:
        """Release every held job (after reading the replies in flight); return those."""
        settled = self.settle_all()
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
