"""How many jobs a job loop may still ask Redis for: `--max-jobs` and child recycling.

A bound on jobs run must hold for the jobs popped too: a worker that asked for a job (a
reserve, the reserve riding on a completion, or an idle registration that lets the engine
hand it one) may get it. So a loop asks for a job only with a ticket in hand: tickets come
from its own cap (`--child-max-jobs`, or `--max-jobs` in a serial worker) and, in a forking
worker with `--max-jobs`, from a pool shared by all the children. A ticket is used up once
the job it brought has started; a job given back unstarted frees its ticket for the next
one; a loop that leaves returns its spare tickets to the pool.
"""

from __future__ import annotations

import multiprocessing

__all__ = ["JobBudget", "SharedJobPool"]

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


class JobBudget:
    """The tickets one job loop holds (job thread only)."""

    def __init__(self, cap: int = 0, pool: SharedJobPool | None = None) -> None:
        self.cap = cap
        self.pool = pool
        self.claimed = 0  # tickets held: jobs started, held, asked for, or spare

    @property
    def limited(self) -> bool:
        """Tell whether any bound applies."""
        return bool(self.cap) or self.pool is not None

    def grant(self, want: int, committed: int) -> int:
        """Return how many of `want` more jobs may be asked for.

        `committed`: the jobs started, held and asked for already (each holds a ticket).
        """
        if not self.limited:
            return want
        missing = want - (self.claimed - committed)
        if missing > 0:
            more = min(missing, self.cap - self.claimed) if self.cap else missing
            if self.pool is not None and more > 0:
                more = self.pool.claim(more)
            self.claimed += max(0, more)
        return max(0, min(want, self.claimed - committed))

    def release_spare(self, committed: int) -> None:
        """Give the tickets beyond `committed` back to the pool (the loop is leaving)."""
        spare = self.claimed - committed
        if spare > 0:
            self.claimed = committed
            if self.pool is not None:
                self.pool.give_back(spare)
