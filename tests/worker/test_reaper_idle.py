"""The idle worker's reaper: one engine call per period and no connection between calls."""

from __future__ import annotations

import signal

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.workers.reaper import CONFIG_MAX_AGE, LeaseReaper
from tests.worker.conftest import wait_until
from tests.worker.test_reaper import FakeClock, ghost_job

pytestmark = pytest.mark.timeout(120)


def _fcalls(r: redis.Redis) -> tuple[int, int]:
    """Return (engine calls, config reads: the HGETALL of config.get) served so far."""
    stats = r.info("commandstats")
    return (int(stats.get("cmdstat_fcall", {}).get("calls", 0)),
            int(stats.get("cmdstat_hgetall", {}).get("calls", 0)))


def _connections(r: redis.Redis) -> int:
    return int(r.info("clients")["connected_clients"])


def test_an_idle_reaper_calls_once_and_holds_no_connection_between_calls(redis_url):
    r = redis.Redis.from_url(redis_url)
    with Client(redis_url) as loader:
        loader.reap()  # the engine loaded: every call below is one FCALL
    base = _connections(r)
    clock = FakeClock()
    reaper = LeaseReaper(lambda: Client(redis_url), clock=clock)
    try:
        calls0, reads0 = _fcalls(r)
        clock.now += 1.3
        reaper.maybe_reap(idle=True)  # the first call: reap, and the config read once
        assert _fcalls(r) == (calls0 + 2, reads0 + 1)
        # The next idle call is ~30 s away: the connection is closed until then.
        assert reaper.seconds_left(idle=True) > 20
        assert _connections(r) == base and reaper.connects == 1
        for n in range(2, 6):
            clock.now += 36.1
            reaper.maybe_reap(idle=True)
            # One engine call per idle period (the config is not read again), on a
            # connection opened for it and closed after it.
            assert _fcalls(r) == (calls0 + n + 1, reads0 + 1)
            assert _connections(r) == base and reaper.connects == n
        assert reaper.period == 5.0  # the engine's defaults, as read at the first call
        # A busy call reads the config and keeps its connection (the next is ~5 s away).
        clock.now += 36.1
        reaper.maybe_reap()
        assert _fcalls(r) == (calls0 + 8, reads0 + 2)
        assert _connections(r) == base + 1
        # Idle again: once CONFIG_MAX_AGE has passed since the last read, read once more.
        clock.now += CONFIG_MAX_AGE + 1
        reaper.maybe_reap(idle=True)
        assert _fcalls(r) == (calls0 + 10, reads0 + 3)
        assert _connections(r) == base
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


def test_a_fixed_short_period_keeps_the_connection(redis_url):
    r = redis.Redis.from_url(redis_url)
    base = _connections(r)
    clock = FakeClock()
    reaper = LeaseReaper(lambda: Client(redis_url), period=2.0, clock=clock)
    try:
        for _ in range(3):
            clock.now += 2.5
            reaper.maybe_reap(idle=True)
        assert reaper.calls == 3 and reaper.connects == 1 and reaper.config_reads == 0
        assert _connections(r) == base + 1
    finally:
        reaper.close()
        r.close()


def test_a_worker_whose_reaper_reconnects_per_call_still_reaps_a_lost_lease(
    short_leases, redis_url, start_worker
):
    qless_client = short_leases
    jid = ghost_job(qless_client, redis_url, "orphan", retries=2)
    r = redis.Redis.from_url(redis_url)
    first_id = int(r.client_id())
    accepted = int(r.info("stats")["total_connections_received"])
    # An idle worker serving another queue; a period of 15 s (12-18 s jittered) is long
    # enough for the reaper to close its connection after each call.
    worker = start_worker("q", "-n", "1", "--reap-interval", "15")
    job = wait_until(
        lambda: (lambda j: j if j.state == "waiting" else None)(qless_client.jobs[jid]),
        timeout=90, step=0.2)
    assert job.queue_name == "orphan" and job.retries == 1
    held = [c for c in r.client_list() if int(c["id"]) > first_id]
    opened = int(r.info("stats")["total_connections_received"]) - accepted
    # Two calls at least (the notice, then back to waiting), each on a connection of its
    # own that was closed after it (the one now held, if any, is a call in progress).
    assert opened - len(held) >= 2, (opened, held)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    r.close()
