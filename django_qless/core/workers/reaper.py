"""Recover lost leases on every known queue, even queues nobody pops (`Client.reap`).

The engine re-offers an expired lease only when someone pops its queue, so the supervisor
(or the serial worker) calls `reap` every half of min(heartbeat, grace-period), clamped to
[1 s, 30 s] and jittered by 20 %; while idle, at least 30 s apart, with the config re-read
at most every CONFIG_MAX_AGE seconds. The same call tops up low cron ticks and carries the
worker's beat (`Beat`, engine `worker.beat`), so an idle worker's beat costs no call of its
own; the beat's reply carries an operator's quiet or stop request (`Beat.on_request`).
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
# Above the idle reaper's longest spacing (36 s of a 60 s beat): beats ride on its reaps.
BEAT_SHARE = 0.65


@dataclass
class Beat:
    """What the reaper's calls say for a worker's group of names, every `seconds` at most."""

    group: str
    seconds: float
    state: Callable[[], str]  # "live" or "draining" (finishing its jobs)
    on_request: Callable[[str], None]  # an operator asked for "quiet" or "stop"
    members: Callable[[], Sequence[str]] = tuple  # the other names it beats for (children)
    started: bool = False  # the first beat (state "start") went through
    sent: tuple[str, ...] | None = None  # the members the engine holds (None: send them)


def obey(action: str, name: str, signals: SignalState,
         request_stop: Callable[[bool], None]) -> None:
    """Act once on an operator's quiet (as QUIT) or stop (as TERM) request."""
    if signals.stop_requests or (action == "quiet" and signals.graceful):
        return
    quiet = action == "quiet"
    log.warning("%s: asked from the console to %s", name,
                "be quiet: finishing running jobs" if quiet else "stop: releasing running jobs")
    request_stop(quiet)


def reap_period(settings: dict[str, Any]) -> float:
    """Return the reaper's base period for the engine's `heartbeat` and `grace-period`."""

    def seconds(key: str, default: float) -> float:
        try:
            return max(float(settings.get(key, default)), 0.0) or default
        except (TypeError, ValueError):
            return default

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
        # None: follow the engine's config; > 0: fixed (--reap-interval).
        self.fixed_period = period
        self._config_at: float | None = None  # when the config was last read (clock)
        self.queues = None if queues is None else list(queues)
        self._clock = clock
        self.period = period or _MAX_PERIOD
        # The first call soon after start: a restarted worker finds its predecessors' leases.
        self.next_at = clock() + _jittered(_MIN_PERIOD)
        self._spacing = 0.0  # the period planned after the last call, and its jitter
        self._jitter = 1.0
        self.calls = 0
        self.failures = 0
        self.reaped = 0
        self.config_reads = 0

    def seconds_left(self, *, idle: bool = False) -> float:
        """Return how long until the next call is due (0 if due now); `idle`: see maybe_reap."""
        return max(0.0, min(self._reap_due(idle), self._beat_due()) - self._clock())

    def maybe_reap(self, *, idle: bool = False, reap: bool = True) -> list[str]:
        """Reap (and beat) if due (`idle`: IDLE_PERIOD apart; `reap` False: beat only)."""
        now = self._clock()
        reap_due = reap and self.reaps and now >= self._reap_due(idle)
        if not reap_due and now < self._beat_due():
            return []
        return self.reap(idle=idle, beat_only=not reap_due)

    def start_beat(self) -> None:
        """Send the first beat (state "start" drops requests left for an older name)."""
        if self.beat is not None:
            self.reap(beat_only=True)

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
        """Call the engine now and plan the next call; log errors, never raise them."""
        jids: list[str] = []
        delay = self.period
        beat = self.beat
        try:
            # Every shard of a cluster: a dead worker's leases may be in any of them.
            clients = self._connection().clients()
            if beat_only:
                self._beat(clients, False)
                return jids
            at = self._config_at
            if self.fixed_period is None and (at is None or not idle
                                              or self._clock() - at >= CONFIG_MAX_AGE):
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
            self.close()
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

    def _connection(self) -> Deployment:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def close(self) -> None:
        """Close the reaper's connection."""
        if self._client is not None:
            try:
                self._client.close()
            except Exception:  # noqa: S110 - closing a broken connection may fail
                pass
            self._client = None


def _jittered(seconds: float) -> float:
    return seconds * (1.0 + _JITTER * (2.0 * random.random() - 1.0))  # noqa: S311
