"""How an idle job loop gets its next job: a hand-off, else a reserve, else a wait.

The loop listens on its wake-up channels and its hand-off channel (wakeup.py) before it
reserves. A reserve that finds nothing registers the worker as idle (`reserve.wait`), so the
engine pops the next ready job for it and publishes it on `ql:hand:<worker>`; the loop takes
such jobs before reserving, and otherwise blocks until a message, a signal, or the next due
time (the engine tells it when a scheduled job, a recurring spawn or a lock expiry is due, and
publishes the queue's wake-up when a call writes an earlier one), or `--interval` (60 s) at
the latest. An idle loop therefore calls the engine about once a minute.
"""

from __future__ import annotations

import logging
import random
from typing import TYPE_CHECKING

import redis

from django_qless.core.exceptions import QlessConnectionError, QlessError

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job
    from django_qless.core.workers.inhand import JobsInHand
    from django_qless.core.workers.reaper import LeaseReaper
    from django_qless.core.workers.reservers import Reserver
    from django_qless.core.workers.wakeup import WakeWaiter
    from django_qless.core.workers.worker_config import WorkerConfig

__all__ = ["MAX_QUEUES_PER_CALL", "JobTaking"]

log = logging.getLogger("django_qless.worker")

MAX_QUEUES_PER_CALL = 20
_TRANSIENT = (QlessConnectionError, redis.ConnectionError, redis.TimeoutError, OSError)


class JobTaking:
    """The taking side of JobLoop (a mixin: the loop owns every attribute used here)."""

    idle_cap: float
    name: str
    config: WorkerConfig
    client: Client
    waiter: WakeWaiter
    reserver: Reserver
    in_hand: JobsInHand
    reaper: LeaseReaper | None
    idling: bool
    _backoff: float

    if TYPE_CHECKING:
        def should_continue(self) -> bool: ...
        def _idle_title(self) -> None: ...
        def _time_left(self) -> float: ...

    def _reserve(self) -> tuple[list[Job], float | None]:
        """Take one job from the selected queues (subscribing to wake-ups first).

        Buffered messages are read first: a hand-off (a job the engine popped for this idle
        worker) is taken as is; wake-ups consumed before the reserve mean, when one arrives
        while we wait, new work. After a broken subscription, hand-offs may have been lost:
        the jobs the engine says this worker holds are taken back first.
        """
        self.waiter.ensure_subscribed()
        self.waiter.drain()
        jobs = self._handed()
        if not jobs and self.waiter.lost and self.waiter.subscribed:
            self.waiter.lost = False
            jobs = self._held_jobs()  # nothing runs or is held now: any such job is lost
        if jobs:
            self._backoff = 0.0
            return jobs, None
        return self._reserve_once()

    def _handed(self) -> list[Job]:
        """Return the jobs handed to this worker so far (read by the last drain)."""
        messages = self.waiter.take_handed()
        return self.client.handed_jobs(messages, self.name) if messages else []

    def _adopt_handed(self) -> None:
        """Hold the jobs handed to this worker (read while it was busy: a race)."""
        if self.waiter.handed:
            self.in_hand.add(self._handed())

    def _reserve_once(self) -> tuple[list[Job], float | None]:
        try:
            order = self.reserver.order()
            wake: float | None = None
            # Wait for a hand-off while idle (one registration per worker: one call's queues).
            ttl = None
            if len(order) <= MAX_QUEUES_PER_CALL and self.waiter.subscribed:
                ttl = self.recheck_after() + 1.0
            for start in range(0, len(order), MAX_QUEUES_PER_CALL):
                chunk = order[start:start + MAX_QUEUES_PER_CALL]
                jobs, chunk_wake = self.client.reserve(chunk, 1, wait=ttl)
                if jobs:
                    self._backoff = 0.0
                    return jobs, None
                if chunk_wake is not None:
                    wake = chunk_wake if wake is None else min(wake, chunk_wake)
            self._backoff = 0.0
            return [], wake
        except _TRANSIENT as exc:
            self._backoff = min(max(self._backoff * 2, 0.1), 10.0)
            log.warning("reserve failed (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff * (0.5 + random.random())  # noqa: S311
        except QlessError as exc:
            self._backoff = min(max(self._backoff * 2, 0.5), 10.0)
            log.error("reserve refused (%s); retrying in %.1fs", exc, self._backoff)
            return [], self._backoff

    def recheck_after(self) -> float:
        """Return how long an idle wait lasts at most (the safety re-check: --interval)."""
        return min(self.config.interval, self.idle_cap)

    def _idle(self, wake: float | None) -> None:
        """Block until a wake-up, a signal, or the next due time."""
        self.idling = True
        self._idle_title()
        timeout = min(self.recheck_after(), max(self._time_left(), 0.005))
        if wake is not None:
            # A lock expiring "now" can report 0 repeatedly during its grace: do not spin.
            timeout = min(timeout, max(wake, 0.005))
        if self.reaper is not None:
            timeout = min(timeout, max(self.reaper.seconds_left(idle=True), 0.005))
        # The supervisor is checked every second meanwhile, without Redis (should_continue).
        self.waiter.wait(timeout, self.should_continue)

    def _held_jobs(self) -> list[Job]:
        """Return the jobs this worker name still holds (`resume`, or hand-offs missed)."""
        try:
            jids = self.client.workers[self.name]["jobs"]
            jobs = self.client.jobs.get_many(*jids) if jids else []
        except QlessError as exc:
            log.error("could not list the jobs this worker holds: %s", exc)
            return []
        held = [j for j in jobs if j.state == "running" and j.worker_name == self.name]
        if held:
            log.info("taking back %d held job(s): %s", len(held), ", ".join(j.jid for j in held))
        return held
