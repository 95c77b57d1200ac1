"""Recover lost leases on every known queue, even queues nobody pops (`Client.reap`).

The engine re-offers an expired lease only when someone pops its queue; a queue whose last
worker died would keep its jobs "running" for a dead worker forever. The supervisor (or the
serial worker) therefore calls `reap` now and then: one script call, every known queue, at
most 100 leases per queue per call. A lease is handled in two steps a grace period apart
(courtesy notice, then back to waiting or failed), so the period follows the engine's own
timing: half of min(heartbeat, grace-period), clamped to [1 s, 30 s], jittered by ±20% so
many supervisors do not call in step; while the worker is idle, calls are at least 30 s apart
(unless --reap-interval fixes the period). Errors are logged and retried later, never raised.

An idle worker's reaper costs Redis one engine call per period: the config is re-read at
every call while jobs run, but while idle only every CONFIG_MAX_AGE seconds (an idle call
waits 30 s whatever the period). Its connection stays open between calls: a reconnect costs
Redis more than an idle connection held 30 s, unless Redis has fewer than five clients.

The same periodic call tops up the ticks of cron schedules running low (schedules.py), at
most every 5 minutes per process: one read per keyspace when none is low.

It also carries the worker's beat (`Beat`, engine `worker.beat`): the reap is sent as part of
the beat, so the beat costs no call of its own while the reaper calls at least every 0.65
beats (the defaults: a call every 30-36 s against a 60 s beat). With a longer period, or
with reaping off, a beat goes alone when due. The beat's reply carries an operator's quiet or
stop request for the worker (`Beat.on_request`).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django_qless.core.workers.shards import Deployment
    from django_qless.core.workers.shutdown import SignalState

__all__ = ["BEAT_SHARE", "CONFIG_MAX_AGE", "IDLE_PERIOD", "Beat", "LeaseReaper", "obey",
           "reap_period"]

log = logging.getLogger("django_qless.worker")

_MIN_PERIOD = 1.0
_MAX_PERIOD = 30.0
IDLE_PERIOD = 30.0  # at least this long between calls while the worker is idle
_JITTER = 0.2
_ENGINE_LIMIT = 100  # leases per queue per call: a full batch means "call again soon"
CONFIG_MAX_AGE = 300.0  # while idle, the engine config is re-read at most this often
# A beat is sent at most this share of the beat after the last one: above the idle reaper's
# longest spacing (30 s + 20 % of a 60 s beat), so an idle worker's beats ride on its reaps.
BEAT_SHARE = 0.65


@dataclass
class Beat:
    """What the reaper's calls say for its worker: its group of worker names (the serial
    worker's own name, a supervisor's for its children) and state, every `seconds` at most."""

    group: str
    seconds: float
    state: Callable[[], str]  # "live" or "draining" (finishing its jobs)
    on_request: Callable[[str], None]  # an operator asked for "quiet" or "stop"
    members: Callable[[], Sequence[str]] = tuple  # the other names it beats for (children)
    started: bool = False  # the first beat (state "start") went through
    sent: tuple[str, ...] | None = None  # the members the engine holds (None: send them)


def obey(action: str, name: str, signals: SignalState,
         request_stop: Callable[[bool], None]) -> None:
    """Act on an operator's request from the console: quiet (finish the running jobs, take
    no new one, exit) as QUIT does, or stop as TERM does; once (a request comes both on the
    worker's channel and with every beat until the worker is gone)."""
    if signals.stop_requests or (action == "quiet" and signals.graceful):
        return
    if action == "quiet":
        log.warning("%s: asked from the console to be quiet: finishing running jobs", name)
    else:
        log.warning("%s: asked from the console to stop: releasing running jobs", name)
    request_stop(action == "quiet")


def reap_period(settings: dict[str, Any]) -> float:
    """Return the reaper's base period for the engine's `heartbeat` and `grace-period`."""

    def seconds(key: str, default: float) -> float:
        try:
            value = float(settings.get(key, default))
        except (TypeError, ValueError):
            return default
        return value if value > 0 else default

    base = min(seconds("heartbeat", 60.0), seconds("grace-period", 10.0)) / 2
    return min(max(base, _MIN_PERIOD), _MAX_PERIOD)


class LeaseReaper:
    """Call `Client.reap` every period (± jitter); cheap to ask whether it is due."""

    def __init__(
        self,
        make_client: Callable[[], Deployment],
        *,
        period: float | None = None,
        queues: Sequence[str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        reaps: bool = True,
    ) -> None:
        self._make_client = make_client
        self.reaps = reaps  # False: the calls only carry the beat (--reap-interval 0)
        self.beat: Beat | None = None  # set by the worker that owns the reaper
        self._beat_at = clock()  # when the last beat went through (clock)
        self._client: Deployment | None = None
        # None: follow the engine's config (re-read at every busy call, and after
        # CONFIG_MAX_AGE while idle); > 0: fixed.
        self.fixed_period = period
        self._config_at: float | None = None  # when the config was last read (clock)
        self.queues = None if queues is None else list(queues)
        self._clock = clock
        self.period = period or _MAX_PERIOD
        # The first call soon after start: a restarted worker finds its predecessors' leases.
        self.next_at = clock() + _jittered(_MIN_PERIOD)
        self._spacing = 0.0  # the period planned after the last call, and its jitter factor
        self._jitter = 1.0
        self.calls = 0
        self.failures = 0
        self.reaped = 0
        self.config_reads = 0

    def seconds_left(self, *, idle: bool = False) -> float:
        """Return how long until the next call is due (0 if due now); `idle`: see maybe_reap."""
        return max(0.0, self._due(idle) - self._clock())

    def maybe_reap(self, *, idle: bool = False, reap: bool = True) -> list[str]:
        """Reap (and beat) if due; return the jids handled (empty when not due or on error).

        `idle`: no job runs in this worker, so calls are spaced at least IDLE_PERIOD apart
        (an idle worker costs Redis next to nothing; a lease expiring on a queue it serves is
        a due time the engine reports to it anyway). `reap` False: only the beat (stopping).
        """
        now = self._clock()
        reap_due = reap and self.reaps and now >= self._reap_due(idle)
        if not reap_due and now < self._beat_due():
            return []
        return self.reap(idle=idle, beat_only=not reap_due)

    def start_beat(self) -> None:
        """Send the first beat (state "start": requests left for this name before go), before
        the worker says hello: a request made once it is listed is never taken for an old
        one."""
        if self.beat is not None:
            self.reap(beat_only=True)

    def _due(self, idle: bool) -> float:
        return min(self._reap_due(idle), self._beat_due())

    def _reap_due(self, idle: bool) -> float:
        if not self.reaps:
            return float("inf")
        # (the first call is never put off, nor a period fixed by --reap-interval)
        if idle and self.fixed_period is None and 0 < self._spacing < IDLE_PERIOD:
            return self.next_at + (IDLE_PERIOD - self._spacing) * self._jitter
        return self.next_at

    def _beat_due(self) -> float:
        beat = self.beat
        return float("inf") if beat is None else self._beat_at + beat.seconds * BEAT_SHARE

    def reap(self, *, idle: bool = False, beat_only: bool = False) -> list[str]:
        """Call the engine now and plan the next call; log errors, never raise them.

        `idle` (see maybe_reap): the config is read at most every CONFIG_MAX_AGE seconds.
        `beat_only`: the beat is due, the reap is not.
        """
        jids: list[str] = []
        delay = self.period
        beat = self.beat
        try:
            # Every shard of a cluster: a dead worker's leases may be in any of them.
            clients = self._connection().clients()
            if beat_only:
                self._beat(clients, False)
                return jids
            if self.fixed_period is None and self._config_due(idle):
                self.period = reap_period(clients[0].config.all)
                self._config_at = self._clock()
                self.config_reads += 1
                delay = self.period
            if beat is None:
                for client in clients:
                    jids += client.reap(self.queues)
            else:
                jids = self._beat(clients, True)
            from django_qless.core.scheduling.schedules import keep_schedules

            keep_schedules(self._connection())  # cron ticks running low (every 5 min at most)
            if len(clients) > 1:  # flow members a dead completer held (flows/gates.py)
                from django_qless.core.flows.gates import sweep_gates

                sweep_gates(self._connection(), idle=idle)
            self.calls += 1
            self.reaped += len(jids)
            if jids:
                log.info("reaper: %d expired lease(s) re-offered or failed: %s", len(jids),
                         ", ".join(jids[:10]) + (" ..." if len(jids) > 10 else ""))
            if len(jids) >= _ENGINE_LIMIT:
                delay = _MIN_PERIOD  # a backlog: catch up soon
        except Exception as exc:  # noqa: BLE001 - a reaper error must never stop a worker
            self.failures += 1
            self._drop_connection()
            if beat is not None:
                self._beat_at = self._clock()  # (tried again a beat share later, not at once)
            if beat_only:
                log.warning("reaper: beat failed (%s)", exc)
                return jids
            log.warning("reaper: reap failed (%s); retrying in about %.0fs", exc, delay)
        self._jitter = _jittered(1.0)
        self._spacing = delay
        self.next_at = self._clock() + delay * self._jitter
        return jids

    def _beat(self, clients: Sequence[Any], reap: bool) -> list[str]:
        """Send the beat (with the reap) to every shard; act on an operator's request."""
        beat = self.beat
        assert beat is not None
        state = beat.state() if beat.started else "start"
        members = tuple(beat.members())
        # (unchanged members are not sent again: the engine keeps them)
        send = None if members == beat.sent and beat.started else members
        jids: list[str] = []
        requests = set()
        lost = False
        for client in clients:
            reply = client.workers.beat(beat.group, state, members=send, reap=reap,
                                        queues=self.queues)
            jids += reply.reaped
            if reply.request:
                requests.add(reply.request)
            lost = lost or reply.members_lost
        beat.sent = None if lost else members  # (lost: sent again with the next beat)
        beat.started = True
        self._beat_at = self._clock()
        for request in sorted(requests, key=("stop", "quiet").index):
            beat.on_request(request)  # (a stop wins over a quiet)
        return jids

    def _config_due(self, idle: bool) -> bool:
        at = self._config_at
        return at is None or not idle or self._clock() - at >= CONFIG_MAX_AGE

    def close(self) -> None:
        """Close the reaper's connection."""
        self._drop_connection()

    def _connection(self) -> Deployment:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _drop_connection(self) -> None:
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: S110 - closing a broken connection may fail
                pass
            self._client = None


def _jittered(seconds: float) -> float:
    return seconds * (1.0 + _JITTER * (2.0 * random.random() - 1.0))  # noqa: S311
