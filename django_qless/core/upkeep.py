"""The keyspace's upkeep, run by a long-lived process (a worker's supervisor, or a serial
worker): expired leases on every known queue, cron ticks running low, stranded flow gates.

The engine re-offers an expired lease only when someone pops its queue, so `LeaseReaper`
reaps every half of min(heartbeat, grace-period), clamped to [1 s, 30 s], jittered by 20 %,
at least 30 s apart while idle. The same call tops up low cron ticks and carries the
process's beat (engine `worker.beat`): an idle worker's beat costs no call.
"""
from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from django_qless.core.types import QlessClient

__all__ = ["BEAT_SHARE", "CONFIG_MAX_AGE", "IDLE_PERIOD", "Beat", "LeaseReaper", "reap_period"]

log = logging.getLogger("django_qless.worker")

_MIN_PERIOD = 1.0
_MAX_PERIOD = 30.0
IDLE_PERIOD = 30.0  # at least this long between calls while the worker is idle
_ENGINE_LIMIT = 100  # leases per queue per call: a full batch means "call again soon"
CONFIG_MAX_AGE = 300.0  # while idle, the engine config is re-read at most this often
# Above the idle reaper's longest spacing (36 s of a 60 s beat): beats ride on its reaps.
BEAT_SHARE = 0.65


class Beat(Protocol):
    """A process's beat, carried by the reaper's calls (the worker's `Beat`)."""

    seconds: float  # at most this long between two beats
    at: float  # when the last beat went through (monotonic)

    def send(self, clients: Sequence[Any], reap: bool, now: float) -> list[str]:
        """Beat (with the reap: return the jids reaped) on every shard."""
        ...


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

    def __init__(self, make_client: Callable[[], QlessClient], *, period: float | None = None,
                 clock: Callable[[], float] = time.monotonic, reaps: bool = True) -> None:
        self._make_client = make_client
        self.reaps = reaps  # False: the calls only carry the beat (--reap-interval 0)
        self.beat: Beat | None = None  # set by the worker that owns the reaper
        self._client: QlessClient | None = None
        self.fixed_period = period  # None: follow the engine's config (else --reap-interval)
        self._config_at: float | None = None  # when the config was last read (clock)
        self._clock = clock
        self.period = period or _MAX_PERIOD
        # The first call soon after start: a restarted worker finds its predecessors' leases.
        self.next_at = clock() + _jittered(_MIN_PERIOD)
        self._spacing = 0.0  # the period planned after the last call, and its jitter
        self._jitter = 1.0
        self.calls = self.failures = self.reaped = self.config_reads = 0

    def seconds_left(self, *, idle: bool = False) -> float:
        """Return how long until the next call is due (0 if due now); `idle`: see maybe_reap."""
        return max(0.0, min(self._reap_due(idle), self._beat_due()) - self._clock())

    def maybe_reap(self, *, idle: bool = False, reap: bool = True) -> list[str]:
        """Reap (and beat) if due (`idle`: IDLE_PERIOD apart; `reap` False: beat only)."""
        now = self._clock()
        reap_due = reap and now >= self._reap_due(idle)
        if not reap_due and now < self._beat_due():
            return []
        return self.reap(idle=idle, beat_only=not reap_due)

    def _reap_due(self, idle: bool) -> float:
        if not self.reaps:
            return float("inf")
        # (the first call is never put off, nor a period fixed by --reap-interval)
        if idle and self.fixed_period is None and 0 < self._spacing < IDLE_PERIOD:
            return self.next_at + (IDLE_PERIOD - self._spacing) * self._jitter
        return self.next_at

    def _beat_due(self) -> float:
        return float("inf") if self.beat is None else self.beat.at + self.beat.seconds * BEAT_SHARE

    def reap(self, *, idle: bool = False, beat_only: bool = False) -> list[str]:
        """Call the engine now (`beat_only`: the first beat, state "start", or one that
        cannot wait) and plan the next call; log errors, never raise them."""
        try:
            # Every shard of a cluster: a dead worker's leases may be in any of them.
            clients = self._connection().clients()
            if beat_only:
                assert self.beat is not None
                self.beat.send(clients, False, self._clock())
                return []
            delay, jids = self._reap(clients, idle)
        except Exception as exc:  # noqa: BLE001 - a reaper error must never stop a worker
            self.failures += 1
            self.close()
            if self.beat is not None:
                self.beat.at = self._clock()  # (tried again a beat share later, not at once)
            if beat_only:
                log.warning("reaper: beat failed (%s)", exc)
                return []
            delay, jids = self.period, []
            log.warning("reaper: reap failed (%s); retrying in about %.0fs", exc, delay)
        self._jitter = _jittered(1.0)
        self._spacing = delay
        self.next_at = self._clock() + delay * self._jitter
        return jids

    def _reap(self, clients: Sequence[Any], idle: bool) -> tuple[float, list[str]]:
        """Reap (and beat), keep the cron ticks and flow gates; return the delay and jids."""
        at = self._config_at
        if self.fixed_period is None and (at is None or not idle
                                          or self._clock() - at >= CONFIG_MAX_AGE):
            self.period = reap_period(clients[0].config.all)
            self._config_at = self._clock()
            self.config_reads += 1
        if self.beat is not None:
            jids = self.beat.send(clients, True, self._clock())
        else:
            jids = [jid for client in clients for jid in client.reap()]
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
        return (_MIN_PERIOD if len(jids) >= _ENGINE_LIMIT else self.period), jids

    def _connection(self) -> QlessClient:
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
    return seconds * (1.0 + 0.2 * (2.0 * random.random() - 1.0))  # noqa: S311
