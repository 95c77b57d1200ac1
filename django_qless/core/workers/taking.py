"""How an idle job loop gets its next job: a hand-off, else a reserve, else a wait.

The loop subscribes to its wake-ups (wakeup.py) before it reserves: one engine call per
shard, in the reserver's order (shards.py). Serving one keyspace, a reserve that finds
nothing registers the worker as idle (`reserve.wait`): the engine then pops the next ready
job for it onto `hand:<worker>`. Otherwise the loop blocks until a message, a signal, the
next due time the engine reported, or `--interval` (60 s): about one engine call a minute.
"""
from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import redis

from django_qless.core.exceptions import QlessConnectionError, QlessError
from django_qless.core.hotpath import RESERVE_QUEUES_MAX

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.job import Job
    from django_qless.core.workers.hand import JobHand
    from django_qless.core.workers.leadership import Leadership
    from django_qless.core.workers.reaper import LeaseReaper
    from django_qless.core.workers.shards import QueueRoutes, Reserver
    from django_qless.core.workers.wakeup import WakeWaiter

__all__ = ["JobTaker"]

log = logging.getLogger("django_qless.worker")

_TRANSIENT = (QlessConnectionError, redis.ConnectionError, redis.TimeoutError, OSError)


class JobTaker:
    """Take the next job for an idle loop: hand-offs, reserves per shard, idle waits."""

    def __init__(
        self,
        name: str,
        routes: QueueRoutes,
        reserver: Reserver,
        waiter: WakeWaiter,
        hand: JobHand,
        *,
        interval: float,
        idle_cap: float,
        time_left: Callable[[], float],
        on_idle: Callable[[], None],
        keep_waiting: Callable[[], bool],
        reaper: LeaseReaper | None = None,
        leadership: Leadership | None = None,
        idle_disconnect: float = 0.0,
    ) -> None:
        self.name = name
        self.routes = routes
        self.reserver = reserver
        self.waiter = waiter
        self.hand = hand
        self.interval = interval
        self.idle_cap = idle_cap
        self.time_left = time_left
        self.on_idle = on_idle  # called before an idle wait (the loop shows its idle title)
        self.keep_waiting = keep_waiting  # asked without Redis while idle (supervisor there?)
        self.check_every = 1.0  # seconds between those checks while waiting for the token
        self.idling = False  # the last reserve found nothing (no job started since)
        self.reaper = reaper  # its next run bounds an idle wait
        self.leadership = leadership  # None: always registers when idle (serial worker)
        self._listening = False  # subscribed once while waiting for the token
        self.idle_disconnect = idle_disconnect  # see _disconnect (0: never)
        self._disconnected = False
        self._cold = False  # connections closed since the last reserve (see `reserve`)
        self._backoff = 0.0

    def await_turn(self) -> bool:
        """Wait, without Redis, for the idle-leader token or a hand-off; False if a signal,
        the supervisor's death or the end of the wait came first (the loop re-checks)."""
        lead = self.leadership
        if lead is None or lead.try_take():
            self._disconnected = False
            return True
        if not self._listening and not self._disconnected:
            if self._until_quiet(lead) <= 0:
                self._disconnect()  # (a new child of an idle worker: nothing to listen for)
            else:
                # Once: the first turn as leader then needs no subscribe round trip.
                self._listening = True
                self.waiter.ensure_subscribed()
        self.idling = True
        self.on_idle()
        lead.want(True)
        try:
            timeout = min(self.recheck_after(), max(self.time_left(), 0.005))
            deadline = time.monotonic() + timeout
            while not lead.held and not self.waiter.handed:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                step = min(left, self.check_every)
                if not self._disconnected:
                    quiet_in = self._until_quiet(lead)
                    if quiet_in <= 0:
                        self._disconnect()
                    else:
                        step = min(step, quiet_in)
                if self.waiter.wait_quietly(lead.notify_fd, step):
                    return False  # a signal: the loop acts on it
                if not self.keep_waiting():
                    return False
            self._disconnected = False
            return True
        finally:
            lead.want(False)  # the token, if it comes now, goes on to the next child

    def _until_quiet(self, lead: Leadership) -> float:
        """Return the seconds until the token stayed `idle_disconnect` with one leader."""
        if not self.idle_disconnect:
            return math.inf
        return self.idle_disconnect - lead.steady_for()

    def _disconnect(self) -> None:
        """Close this child's connections until it leads (it has nothing to say or hear).

        Only once the token stayed `idle_disconnect` seconds with one leader: an idle
        connection costs Redis CPU (its cron visits each), but reopening one costs minutes
        of that, so children that take turns leading keep theirs.
        """
        self._disconnected = True
        self._cold = True
        self._listening = False  # subscribe again at the start of the next wait
        self.waiter.disconnect()
        self.routes.deployment.disconnect()
        log.debug("leader unchanged for %gs: connections closed until this child leads",
                  self.idle_disconnect)

    def pass_turn(self, *, soon: bool = False) -> None:
        """Give the idle-leader token up (`soon`: a job starts; the helper unlocks it)."""
        if self.leadership is not None:
            self.leadership.release(soon=soon, watch=self.waiter.sockets)

    def reserve(self) -> tuple[list[Job], float | None]:
        """Take a hand-off, else jobs held but lost, else reserve (subscribed first); also
        return the seconds until due work when there is none.

        A child that closed its connections (`_disconnect`) reserves once before it
        subscribes, without registering: a waiting job then starts after one reconnect; if
        that finds nothing, the usual subscribe and reserve follow.
        """
        cold, self._cold = self._cold, False
        # (After a lost hand-off, the jobs it holds come first, once subscribed.)
        if cold and not self.waiter.subscribed and not self.waiter.lost:
            jobs, _ = self._reserve_once()
            if jobs:
                return jobs, None
        self.waiter.ensure_subscribed()
        self.waiter.drain()  # (a reply read in part is read whole: NodeConnection.pump)
        jobs = self.handed()
        if not jobs and self.waiter.lost and self.waiter.subscribed:
            self.waiter.lost = False
            jobs = self.held_jobs()  # nothing runs or is held now: any such job is lost
        if jobs:
            self._backoff = 0.0
            return jobs, None
        jobs, wake = self._reserve_once()
        if jobs and self.waiter.subscribed:
            # Registered as idle meanwhile, it may have been handed a job too: hold it, so
            # it goes back to waiting if this job runs long.
            self.waiter.drain()
            self.hand.adopt_handed()
        return jobs, wake

    def handed(self) -> list[Job]:
        """Return the jobs handed to this worker so far (read by the last drain)."""
        messages = self.waiter.take_handed()
        client = self.waiter.hand_client
        return client.handed_jobs(messages, self.name) if messages and client else []

    def plan(self) -> list[tuple[Client, list[str]]]:
        """Return this attempt's engine calls: (shard client, its queues in order)."""
        return [(client, queues[start:start + RESERVE_QUEUES_MAX])
                for client, queues in self.routes.plan(self.reserver.order())
                for start in range(0, len(queues), RESERVE_QUEUES_MAX)]

    def _reserve_once(self) -> tuple[list[Job], float | None]:
        try:
            plan = self.plan()
            wake: float | None = None
            # Register for a hand-off only in the shard whose channel the waiter hears.
            ttl = None
            if (len(plan) == 1 and plan[0][0] is self.waiter.hand_client
                    and self.waiter.subscribed):
                ttl = self.recheck_after() + 1.0
            for client, queues in plan:
                jobs, due = client.reserve(queues, 1, self.name, wait=ttl)
                if jobs:
                    self._backoff = 0.0
                    return jobs, None
                if due is not None:
                    wake = due if wake is None else min(wake, due)
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
        return min(self.interval, self.idle_cap)

    def idle(self, wake: float | None) -> bool:
        """Block until a wake-up, a signal, or the next due time; True if a message came."""
        self.idling = True
        self.on_idle()
        timeout = min(self.recheck_after(), max(self.time_left(), 0.005))
        if wake is not None:
            # (a lock expiring "now" reports 0 during its grace: do not spin)
            timeout = min(timeout, max(wake, 0.005))
        if self.reaper is not None:
            timeout = min(timeout, max(self.reaper.seconds_left(idle=True), 0.005))
        return self.waiter.wait(timeout, self.keep_waiting)

    def held_jobs(self) -> list[Job]:
        """Return the jobs this worker still holds in its shards (resume, hand-offs lost)."""
        held: list[Job] = []
        for client in self.routes.served():
            try:
                jids = client.workers[self.name]["jobs"]
                jobs = client.jobs.get_many(*jids) if jids else []
            except QlessError as exc:
                log.error("could not list the jobs this worker holds: %s", exc)
                continue
            held += [j for j in jobs if j.state == "running" and j.worker_name == self.name]
        if held:
            log.info("taking back %d held job(s): %s", len(held), ", ".join(j.jid for j in held))
        return held
