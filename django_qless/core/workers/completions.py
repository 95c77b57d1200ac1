"""How a job loop completes a finished job: sent ahead, kept for a later call, or waited for.

After a short job, while another job is held or coming, the completion is only sent (the
next job runs while Redis works; inhand.py). If the next job is expected short too, the
completion is kept instead and rides with a later job's `complete.reserve` (the engine's
paired form): up to BATCH completions per engine call, so short jobs share the call's
fixed price (dispatch, clock, config, the worker's count, the reserve's checks). A kept
completion waits for at most BATCH - 1 short jobs (each < PREFETCH_BELOW); a job that runs
long, fails or is aborted, an empty hand, another shard, a pause or a stop sends the kept
ones at once (the heartbeat thread does it for a job still running after HAND_BACK_AFTER).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from django_qless.core.exceptions import QlessError
from django_qless.core.workers.inhand import (
    JobsInHand,
    complete_alone,
    complete_outcome,
    complete_outcomes,
    fail_refused,
    refused_for_good,
)
from django_qless.core.workers.joblog import log_job
from django_qless.core.workers.runner import Outcome

if TYPE_CHECKING:
    from django_qless.core.job import Job
    from django_qless.core.workers.budget import JobBudget
    from django_qless.core.workers.taking import JobTaker
    from django_qless.core.workers.wakeup import WakeWaiter

__all__ = ["BATCH", "PREFETCH_BELOW", "Completions"]

log = logging.getLogger("django_qless.worker")

# A job that ran this briefly lets the loop hold the next job ahead and keep its completion.
PREFETCH_BELOW = 0.005
# Completions one engine call carries at most: the call's own and BATCH - 1 kept ones.
BATCH = 8
# Jobs held or coming after a short job: the next and one ahead; while completions are kept,
# enough for the call that carries BATCH of them to run on while it is in flight (steady
# state: every call asks for BATCH jobs).
_DEPTH = 2
_DEPTH_KEPT = BATCH + 1
# While jobs flow, buffered wake-ups are consumed at most this often (the wake socket must
# not fill up); the reserve that follows an empty complete+reserve drains anyway.
_DRAIN_EVERY = 0.05


class Completions:
    """Complete the jobs of one job loop (its job thread)."""

    def __init__(
        self,
        in_hand: JobsInHand,
        taker: JobTaker,
        waiter: WakeWaiter,
        budget: JobBudget,
        *,
        prefetch: bool,
        settled: Callable[[Job, Outcome], None],
        will_take_after: Callable[[], bool],
        committed: Callable[[], int],
    ) -> None:
        self.in_hand = in_hand
        self.taker = taker
        self.waiter = waiter
        self.budget = budget
        self.prefetch = prefetch
        self._settled = settled
        self._will_take_after = will_take_after
        self._committed = committed
        # Job classes whose last run was not short: the next job of such a class is not
        # expected short, so no completion is kept for its call.
        self._slow: set[str] = set()
        self._drain_at = 0.0

    def ran(self, job: Job, elapsed: float) -> None:
        """Note how long `job` ran (the next job of its class is expected as long)."""
        if elapsed < PREFETCH_BELOW:
            self._slow.discard(job.klass_name)
        elif len(self._slow) < 1024:
            self._slow.add(job.klass_name)

    def next_is_short(self) -> bool:
        """Tell whether the job that runs next is expected short (its class ran short last
        time, or is not known yet); the next job may still be on its way."""
        klass = self.in_hand.next_klass()
        return klass is None or klass not in self._slow

    def settle_inflight(self) -> None:
        """Read the oldest reply of a completion sent ahead, if any (its jobs are held)."""
        for settled in self.in_hand.settle() or ():
            self._settled(*settled)

    def settle_all(self) -> None:
        """Read every reply in flight, oldest first."""
        for settled in self.in_hand.settle_all():
            self._settled(*settled)

    def flush_kept(self) -> None:
        """Complete the kept jobs now, in one call (no job to take them along)."""
        for settled in self.in_hand.flush_kept():
            self._settled(*settled)

    def complete(self, job: Job, elapsed: float) -> Outcome | None:
        """Complete `job` and, if we may, take the next jobs in the same round trip.

        Returns None when the completion was sent ahead or kept (its outcome is counted
        when the reply of the call that carries it is read), else the job's outcome.
        """
        in_hand = self.in_hand
        ahead = self.prefetch and elapsed < PREFETCH_BELOW
        kept = in_hand.take_kept()
        if kept and kept[0].client is not job.client:
            for done in in_hand.complete_kept(kept):  # another shard: a call of their own
                self._settled(*done)
            kept = []
        if not ahead:
            self.settle_all()  # a completion waited for comes after the ones in flight
        elif in_hand.in_flight >= in_hand.max_in_flight:
            self.settle_inflight()
        held = len(in_hand) + in_hand.coming
        taking = self._will_take_after()
        if (ahead and held and taking and len(kept) < BATCH - 1
                and self.next_is_short()):
            in_hand.keep([*kept, job])  # counted when the call that takes them is read
            return None
        batch = [*kept, job]
        queues, want = self._reserve_plan(job, ahead, taking, held, bool(kept))
        if ahead and held and taking:
            try:
                in_hand.send(batch, queues, want)
                return None
            except QlessError as exc:  # refused before sending (bad arguments)
                if kept:  # each alone: each refusal is its own job's
                    for other in kept:
                        self._settled(other, complete_alone(other))
                    return complete_alone(job)
                if refused_for_good(exc):
                    return fail_refused(job, exc)
                log_job(logging.ERROR, job, "job %s: could not be completed: %s", job.jid,
                        exc)
                return Outcome.LOST
        self.settle_all()
        if not kept:
            outcome, jobs = complete_outcome(
                job, lambda: job.client.complete_and_reserve(job, queues, want))
            in_hand.add(jobs)
            return outcome
        outcomes, jobs = complete_outcomes(
            batch, lambda: job.client.complete_many_and_reserve(batch, queues, want))
        in_hand.add(jobs)
        for one in outcomes[:-1]:
            self._settled(*one)
        return outcomes[-1][1]

    def _reserve_plan(
        self, job: Job, ahead: bool, taking: bool, held: int, kept: bool
    ) -> tuple[list[str], int]:
        """Return the queues the completing call reserves from and how many jobs it asks
        for (never past the budget)."""
        # The next job comes along only from the job's own shard, and only when the
        # reserver's order starts there (else: complete now, reserve in the next attempt).
        plan = self.taker.plan()
        along = bool(plan) and plan[0][0] is job.client
        queues = plan[0][1] if along else [job.queue_name]
        want = 0
        if taking and along:
            depth = 1
            if ahead:
                depth = _DEPTH_KEPT if kept or self.next_is_short() else _DEPTH
            want = max(0, depth - held)
            if self.budget.limited:
                want = self.budget.grant(want, self._committed())
        if want:
            self.waiter.ensure_subscribed()
            now = time.monotonic()
            if now >= self._drain_at:
                self._drain_at = now + _DRAIN_EVERY
                self.waiter.drain()
                self.taker.adopt_handed()
        return queues, want
