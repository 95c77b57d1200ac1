"""`JobHand`: a loop's held jobs, unsettled completions and tickets, and its engine calls
that take or give back jobs; what settles is returned as `(job, outcome)` pairs to report.
The job and heartbeat threads (a long job hands the held jobs back) share it: one lock.
"""

from __future__ import annotations

import logging
import multiprocessing
import random
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import redis

from django_qless.core.exceptions import (
    InvalidArgument,
    QlessConnectionError,
    QlessError,
    ScriptError,
)
from django_qless.core.hotpath import RESERVE_QUEUES_MAX
from django_qless.core.workers.runner import LOST, Outcome, fail_job, log_job

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.engine.deferred import DeferredCall
    from django_qless.core.job import Job
    from django_qless.core.workers.shards import Reserver
    from django_qless.core.workers.wakeup import WakeWaiter

__all__ = ["BATCH", "COMPLETE_REFUSED_GROUP", "PREFETCH_BELOW", "JobHand", "Settled",
           "SharedJobPool", "release_job"]

log = logging.getLogger("django_qless.worker")

Settled = list[tuple["Job", Outcome]]

# A job that ran this briefly lets the loop hold the next job ahead and keep its completion.
PREFETCH_BELOW = 0.005
# Completions one engine call carries at most: the call's own and BATCH - 1 kept ones.
BATCH = 8
# Jobs held or coming after a short job; while completions are kept, enough for the call
# that carries BATCH of them to run on while it is in flight.
_DEPTH, _DEPTH_KEPT = 2, BATCH + 1
_MAX_IN_FLIGHT = 2  # completions sent and not read yet (the job thread reads the older first)
# While jobs flow, buffered wake-ups are read at most this often (the wake socket must not
# fill up); the reserve that follows an empty complete+reserve drains anyway.
_DRAIN_EVERY = 0.05
# A completion refused for a reason other than a lost lease or the transport can never
# succeed (data over 1 MiB, not JSON): the job is failed at once, in this group.
COMPLETE_REFUSED_GROUP = "django_qless.CompleteRefused"
_TRANSIENT_PREFIXES = ("OOM ", "NOPERM ")  # error replies that say nothing about the call
_TRANSIENT = (QlessConnectionError, redis.ConnectionError, redis.TimeoutError, OSError)
_SEM_MAX = 2**31 - 1  # SEM_VALUE_MAX on Linux


class SharedJobPool:
    """The jobs a whole forking worker may still start, shared with its children by fork."""

    def __init__(self, total: int) -> None:
        # A POSIX semaphore: no lock to leave held when a child is SIGKILLed.
        self._sem = multiprocessing.get_context("fork").Semaphore(min(total, _SEM_MAX))

    def claim(self, count: int) -> int:
        """Take up to `count` tickets; return how many were left to take."""
        got = 0
        while got < count and self._sem.acquire(block=False):
            got += 1
        return got

    def give_back(self, count: int) -> None:
        """Return `count` tickets (unused, or of jobs given back unstarted)."""
        for _ in range(count):
            self._sem.release()

    def remaining(self) -> int:
        """Return how many tickets nobody holds."""
        return int(self._sem.get_value())


def release_job(client: Client, jid: str, worker: str) -> bool:
    """Put a job held by `worker` back to waiting, spending no retry (False: not its own)."""
    try:
        client.workers.release(jid, worker)
    except LOST:
        return False
    log.info("job %s released back to waiting", jid)
    return True


def _refused(job: Job, exc: QlessError) -> Outcome:
    """Return the outcome of `job` once the engine refused its completion with `exc`."""
    if isinstance(exc, LOST):
        log_job(logging.WARNING, job, "job %s: not completed, this worker lost its lease: %s",
                job.jid, exc)
        return Outcome.LOST
    if not isinstance(exc, InvalidArgument) and not (
            isinstance(exc, ScriptError) and not str(exc).startswith(_TRANSIENT_PREFIXES)):
        log_job(logging.ERROR, job, "job %s: could not be completed: %s", job.jid, exc)
        return Outcome.LOST
    log_job(logging.ERROR, job, "job %s: completion refused, failing the job: %s", job.jid,
            exc)
    job._drop_data_changes()
    return fail_job(job, COMPLETE_REFUSED_GROUP, f"The worker could not complete this "
                    f"{job.klass_name} job: {exc}\nThe job's changes to its data were not "
                    f"saved.\nworker: {job.worker_name}")


def _read(jobs: Sequence[Job], queues: Sequence[str] | None = None, count: int = 0,
          call: DeferredCall[Any] | None = None) -> tuple[Settled, list[Job]]:
    """Complete `jobs` (of one shard) reserving `count` more, or read `call`'s reply."""
    last = jobs[-1]
    queues = [last.queue_name] if queues is None else queues
    try:
        if call is not None:
            results, more, _ = call.result()
        elif len(jobs) == 1:
            results, more, _ = last.client.complete_and_reserve(last, queues, count)
        else:
            results, more, _ = last.client.complete_many_and_reserve(jobs, queues, count)
    except QlessError as exc:
        if len(jobs) == 1:
            return [(last, _refused(last, exc))], []
        # A paired call refused as a whole wrote nothing: each job goes alone.
        log.info("jobs %s: paired completion refused (%s); completing each alone",
                 " ".join(j.jid for j in jobs), exc)
        return [_read([job])[0][0] for job in jobs], []
    if len(jobs) == 1:
        return [(last, Outcome.COMPLETED)], more
    return [(job, _refused(job, r) if isinstance(r, QlessError) else Outcome.COMPLETED)
            for job, r in zip(jobs, results, strict=True)], more


class JobHand:
    """One job loop's held jobs (FIFO), completions in flight and kept, and tickets."""

    def __init__(self, worker: str, waiter: WakeWaiter, reserver: Reserver, *, cap: int = 0,
                 pool: SharedJobPool | None = None, prefetch: bool = True,
                 register_for: float = 0.0) -> None:
        self.worker = worker
        self.waiter = waiter
        self.reserver = reserver
        self.cap, self.pool = cap, pool
        self.limited = bool(cap) or pool is not None
        self.claimed = 0  # tickets taken: jobs started, held, asked for, or spare
        self.prefetch = prefetch
        self.register_for = register_for  # seconds an idle registration lasts
        self._backoff = 0.0
        self._lock = threading.Lock()
        self._jobs: deque[Job] = deque()
        # (jobs completed, jobs it asked for, the call), oldest first.
        self._inflight: deque[tuple[tuple[Job, ...], int, DeferredCall[Any]]] = deque()
        self.coming = 0  # jobs the calls in flight asked for (they may bring fewer)
        self.kept: list[Job] = []  # finished (of one client), to ride with a later call
        self._slow: set[str] = set()  # job classes whose last run was not short
        self.ran_for: dict[str, float] = {}  # how long each job ran, until it is reported
        self._drain_at = 0.0
        self.taken = 0  # jobs started (what the tickets count)
        self.carried = 0  # completions kept to ride with a later job's call
        self.sent_ahead = 0  # completions sent without waiting
        self.handed_back = 0  # jobs held ahead and released unstarted

    def __len__(self) -> int:
        return len(self._jobs)

    def holding(self) -> bool:
        """Tell whether jobs are held, or completions in flight or kept."""
        return bool(self._jobs or self._inflight or self.kept)

    def committed(self) -> int:
        """Return the jobs that hold a ticket: started, held, and asked for."""
        return self.taken + len(self._jobs) + self.coming

    def out_of_tickets(self) -> bool:
        """Tell whether no ticket is left for a further job."""
        return self.limited and self._grant(1) == 0

    def _grant(self, want: int) -> int:
        """Return how many of `want` more jobs may be asked for, claiming their tickets."""
        committed = self.committed()
        missing = want - (self.claimed - committed)
        if missing > 0:
            more = min(missing, self.cap - self.claimed) if self.cap else missing
            if self.pool is not None and more > 0:
                more = self.pool.claim(more)
            self.claimed += max(0, more)
        return max(0, min(want, self.claimed - committed))

    def release_spare(self) -> None:
        """Give the tickets no job holds back to the pool (the loop is leaving)."""
        spare = self.claimed - self.committed()
        if spare > 0:
            self.claimed -= spare
            if self.pool is not None:
                self.pool.give_back(spare)

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

    def next_held(self) -> tuple[Job | None, Settled]:
        """Return the next held job, reading replies in flight until one brings one."""
        settled: Settled = []
        while (job := self.take()) is None and self._inflight:
            settled += self._settle(keep=len(self._inflight) - 1)
        return job, settled

    def handed(self) -> list[Job]:
        """Return the jobs the engine handed to this worker since the last call."""
        messages, client = self.waiter.take_handed(), self.waiter.hand_client
        return client.handed_jobs(messages, self.worker) if messages and client else []

    def adopt_handed(self) -> None:
        """Hold the jobs the engine handed to this worker (read while it was busy)."""
        if self.waiter.handed:
            self.add(self.handed())

    def reclaim(self) -> list[Job]:
        """Return the jobs this worker still holds in its shards (resume, hand-offs lost)."""
        held: list[Job] = []
        for client in self.waiter.routes.served():
            try:
                jids = client.workers[self.worker]["jobs"]
                jobs = client.jobs.get_many(*jids) if jids else []
            except QlessError as exc:
                log.error("could not list the jobs this worker holds: %s", exc)
                continue
            held += [j for j in jobs if j.state == "running" and j.worker_name == self.worker]
        if held:
            log.info("taking back %d held job(s): %s", len(held), ", ".join(j.jid for j in held))
        return held

    def reserve(self) -> tuple[list[Job], float | None]:
        """Reserve one job from the first shard that has one; else the next due time."""
        jobs: list[Job] = []
        wake: float | None = None
        try:
            plan = self._plan()
            # Register for a hand-off only in the shard whose channel the waiter hears.
            ttl = None
            if (len(plan) == 1 and plan[0][0] is self.waiter.hand_client
                    and self.waiter.subscribed):
                ttl = self.register_for + 1.0
            for client, queues in plan:
                jobs, due = client.reserve(queues, 1, self.worker, wait=ttl)
                if jobs:
                    break
                if due is not None:
                    wake = due if wake is None else min(wake, due)
        except _TRANSIENT as exc:
            self._backoff = min(max(self._backoff * 2, 0.1), 10.0)
            log.warning("reserve failed (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff * (0.5 + random.random())  # noqa: S311
        except QlessError as exc:
            self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
            log.error("reserve refused (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff
        self._backoff = 0.0
        return (jobs, None) if jobs else ([], wake)

    def _plan(self) -> list[tuple[Client, list[str]]]:
        """Return this attempt's engine calls: (shard client, its queues in order)."""
        return [(client, queues[start:start + RESERVE_QUEUES_MAX])
                for client, queues in self.waiter.routes.plan(self.reserver.order())
                for start in range(0, len(queues), RESERVE_QUEUES_MAX)]

    def hand_back(self) -> Settled:
        """Settle what is in flight and kept, then release every held job (no retry spent)."""
        settled = self._settle() + self.flush_kept()
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

    def ran(self, job: Job, elapsed: float) -> None:
        """Note how long `job` ran (the next job of its class is expected as long)."""
        self.ran_for[job.jid] = elapsed
        if elapsed < PREFETCH_BELOW:
            self._slow.discard(job.klass_name)
        elif len(self._slow) < 1024:
            self._slow.add(job.klass_name)

    def _next_is_short(self) -> bool:
        """Tell whether the job that runs next is expected short (or is not known yet)."""
        with self._lock:
            klass = self._jobs[0].klass_name if self._jobs else None
        return klass is None or klass not in self._slow

    def flush_kept(self) -> Settled:
        """Complete the kept jobs now, in one call of their own (no job to take them along)."""
        with self._lock:
            jobs, self.kept = self.kept, []
        return _read(jobs)[0] if jobs else []

    def complete(self, job: Job, elapsed: float, taking: bool) -> Settled:
        """Complete `job`, reserving the next ones if `taking`; return what settled."""
        ahead = self.prefetch and elapsed < PREFETCH_BELOW
        settled: Settled = []
        if self.kept and self.kept[0].client is not job.client:
            settled = self.flush_kept()  # another shard: a call of their own
        with self._lock:
            batch, self.kept = [*self.kept, job], []
        # A completion waited for comes after those sent.
        settled += self._settle(keep=_MAX_IN_FLIGHT - 1 if ahead else 0)
        held = len(self._jobs) + self.coming
        flowing = ahead and held > 0 and taking
        if flowing and len(batch) < BATCH and self._next_is_short():
            with self._lock:  # reported when the call that carries them is read
                self.kept = batch
                self.carried += 1
            return settled
        queues, want = self._reserve_plan(job, ahead, taking, held, len(batch) > 1)
        if flowing:
            try:
                self._send(batch, queues, want)
            except QlessError:  # refused before sending (bad arguments): each alone
                return settled + [_read([j])[0][0] for j in batch]
            return settled
        settled += self._settle()
        done, jobs = _read(batch, queues, want)
        self.add(jobs)
        return settled + done

    def _reserve_plan(self, job: Job, ahead: bool, taking: bool, held: int,
                      kept: bool) -> tuple[list[str], int]:
        """Return the queues a completion reserves from and how many jobs it asks for."""
        # The next job comes along only from the job's own shard, and only when the
        # reserver's order starts there (else: complete now, reserve in the next attempt).
        plan = self._plan()
        along = bool(plan) and plan[0][0] is job.client
        queues = plan[0][1] if along else [job.queue_name]
        want = 0
        if taking and along:
            depth = 1
            if ahead:
                depth = _DEPTH_KEPT if kept or self._next_is_short() else _DEPTH
            want = max(0, depth - held)
            if self.limited:
                want = self._grant(want)
        if want:
            self.waiter.ensure_subscribed()
            now = time.monotonic()
            if now >= self._drain_at:
                self._drain_at = now + _DRAIN_EVERY
                self.waiter.drain()
                self.adopt_handed()
        return queues, want

    def _send(self, jobs: Sequence[Job], queues: Sequence[str], count: int) -> None:
        """Send the completion of `jobs` (of one shard), reserving `count` more."""
        with self._lock:
            last = jobs[-1]
            call: DeferredCall[Any]
            if len(jobs) == 1:
                call = last.client.send_complete_and_reserve(last, queues, count)
            else:
                call = last.client.send_complete_many(jobs, queues, count)
            self._inflight.append((tuple(jobs), count, call))
            self.coming += count
            self.sent_ahead += len(jobs)

    def _settle(self, keep: int = 0) -> Settled:
        """Read the replies in flight, oldest first, until `keep` are left (their jobs held)."""
        settled: Settled = []
        with self._lock:
            while len(self._inflight) > keep:
                jobs, count, call = self._inflight.popleft()
                self.coming -= count
                done, more = _read(jobs, call=call)
                self._jobs.extend(more)
                settled += done
        return settled
