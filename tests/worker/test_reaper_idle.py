"""The idle worker's reaper: one engine call per period and no connection between calls."""

from __future__ import annotations

import signal
import threading
import time

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.scheduling import schedules
from django_qless.core.upkeep import CONFIG_MAX_AGE, LeaseReaper
from tests.worker.conftest import wait_until
from tests.worker.test_reaper import FakeClock

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(autouse=True)
def schedules_just_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count the reaper's own calls: its cron top-up (one engine call at most every 5 minutes
    per process, so whether it runs depends on the tests before) is marked as just done."""
    monkeypatch.setattr(schedules, "_kept_at", [time.monotonic()])


def _fcalls(r: redis.Redis) -> tuple[int, int]:
    """Return (engine calls, config reads: the HGETALL of config.get) served so far."""
    stats = r.info("commandstats")
    return (int(stats.get("cmdstat_fcall", {}).get("calls", 0)),
            int(stats.get("cmdstat_hgetall", {}).get("calls", 0)))


def _connections(r: redis.Redis) -> int:
    return int(r.info("clients")["connected_clients"])


def test_an_idle_reaper_makes_one_engine_call_per_period(redis_url):
    r = redis.Redis.from_url(redis_url)
    with Client(redis_url) as loader:
        loader.reap()  # the engine loaded: every call below is one FCALL
    clock = FakeClock()
    reaper = LeaseReaper(lambda: Client(redis_url), clock=clock)
    try:
        calls0, reads0 = _fcalls(r)
        clock.now += 1.3
        reaper.maybe_reap(idle=True)  # the first call: reap, and the config read once
        assert _fcalls(r) == (calls0 + 2, reads0 + 1)
        for n in range(2, 6):
            clock.now += 36.1
            reaper.maybe_reap(idle=True)
            # One engine call per idle period: the config is not read again.
            assert _fcalls(r) == (calls0 + n + 1, reads0 + 1)
        assert reaper.calls == 5 and reaper.config_reads == 1
        assert reaper.period == 5.0  # the engine's defaults, as read at the first call
        # A busy call reads the config.
        clock.now += 36.1
        reaper.maybe_reap()
        assert _fcalls(r) == (calls0 + 8, reads0 + 2)
        # Idle again: once CONFIG_MAX_AGE has passed since the last read, read once more.
        clock.now += CONFIG_MAX_AGE + 1
        reaper.maybe_reap(idle=True)
        assert _fcalls(r) == (calls0 + 10, reads0 + 3)
        clock.now += 36.1
        reaper.maybe_reap(idle=True)
        assert _fcalls(r) == (calls0 + 11, reads0 + 3)
    finally:
        reaper.close()
        r.close()


def test_an_idle_reaper_follows_a_config_change_once_busy(short_leases, redis_url):
    clock = FakeClock()
    short_leases.config["heartbeat"] = 600
    short_leases.config["grace-period"] = 600
    reaper = LeaseReaper(lambda: Client(redis_url), clock=clock)
    try:
        clock.now += 1.3
        reaper.maybe_reap(idle=True)
        assert reaper.period == 30.0
        short_leases.config["heartbeat"] = 2
        short_leases.config["grace-period"] = 1
        clock.now += 36.1
        reaper.maybe_reap(idle=True)
        assert reaper.period == 30.0 and reaper.config_reads == 1  # idle: not read again
        clock.now += 36.1
        reaper.maybe_reap()
        assert reaper.period == 1.0 and reaper.config_reads == 2  # busy: read at once
    finally:
        reaper.close()


def test_an_idle_worker_reads_the_config_once_over_its_reaper_calls(redis_url, start_worker):
    """End to end: an idle worker's supervisor calls `worker.beat` (its reap and its beat)
    every ~30 s, and `config.get` only before its first call."""
    with Client(redis_url) as loader:
        loader.reap()  # the engine loaded before MONITOR starts
    mon = redis.Redis.from_url(redis_url, socket_timeout=None).monitor()
    names: list[str] = []

    def read() -> None:
        try:
            while True:
                argv = mon.next_command()["command"].split()
                if argv[0] == "FCALL" and len(argv) > 3:
                    # (the beat sent alone at the start: "worker.beat now group start 0")
                    alone = argv[3] == "worker.beat" and argv[7:8] == ["0"]
                    names.append("beat-alone" if alone else argv[3])
        except (redis.ConnectionError, OSError, ValueError):
            pass

    with mon:
        threading.Thread(target=read, daemon=True).start()
        worker = start_worker("q", "-n", "1")
        wait_until(lambda: names.count("worker.beat") >= 2, timeout=60, step=0.2)
        worker.signal(signal.SIGQUIT)
        assert worker.wait() == 0
    # (the children read it as they start; the reaper at its first call, then not again)
    assert "reap" not in names  # (it rides on the beat)
    first = names.index("worker.beat")
    assert "config.get" in names[:first]
    assert "config.get" not in names[first:], names
