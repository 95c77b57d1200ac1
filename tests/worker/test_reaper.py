"""The periodic lease reaper: lost leases on queues nobody pops come back (or fail)."""

from __future__ import annotations

import logging
import signal
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.upkeep import LeaseReaper, reap_period
from django_qless.core.worker_options import WorkerConfig
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(60)


def ghost_job(qless_client: Client, redis_url: str, queue: str, retries: int) -> str:
    """Put a job on `queue` and pop it as a worker that never heartbeats; return its jid."""
    jid = qless_client.queues[queue].put("tests.worker.jobs.noop", {}, retries=retries)
    ghost = Client(redis_url, worker_name="ghost-worker")
    try:
        job = ghost.queues[queue].pop()
        assert job is not None and job.jid == jid
    finally:
        ghost.close()
    assert qless_client.jobs[jid].state == "running"
    return jid


@pytest.mark.parametrize("processes", ["1", "0"])
def test_worker_reaps_a_lost_lease_on_a_queue_nobody_pops(
    short_leases, redis_url, start_worker, processes
):
    qless_client = short_leases
    jid = ghost_job(qless_client, redis_url, "orphan", retries=2)
    # The worker serves another queue: no pop on "orphan" ever happens, only the reaper
    # can give the job back (an idle worker's reaper waits 30 s between calls, unless the
    # period is fixed).
    worker = start_worker("q", "-n", processes, "--reap-interval", "1")
    job = wait_until(
        lambda: (lambda j: j if j.state == "waiting" else None)(qless_client.jobs[jid]),
        timeout=20, step=0.1)
    assert job.queue_name == "orphan" and job.worker_name == ""
    assert job.retries == 1  # one retry spent on the lost lease
    assert jid not in qless_client.workers["ghost-worker"]["jobs"]
    # The queue's own work is untouched by the reaper and still served.
    done = qless_client.queues["q"].put("tests.worker.jobs.noop", {})
    wait_until(lambda: qless_client.jobs[done].state == "complete", timeout=10)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert qless_client.jobs[jid].state == "waiting"  # nobody serves "orphan": it waits there


def test_reaped_lease_without_retries_left_fails(short_leases, redis_url, start_worker):
    qless_client = short_leases
    jid = ghost_job(qless_client, redis_url, "orphan", retries=0)
    worker = start_worker("q", "-n", "1", "--reap-interval", "1")
    job = wait_until(lambda: (lambda j: j if j.state == "failed" else None)(qless_client.jobs[jid]),
                     timeout=20, step=0.1)
    assert job.failure is not None and job.failure["group"] == "failed-retries-orphan"
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_reaper_calls_only_when_due_and_recovers_the_lease(short_leases, redis_url):
    qless_client = short_leases
    jid = ghost_job(qless_client, redis_url, "orphan", retries=3)
    clock = FakeClock()
    reaper = LeaseReaper(lambda: Client(redis_url), clock=clock)
    try:
        assert 0.8 <= reaper.seconds_left() <= 1.2  # first call about a second after start
        assert reaper.maybe_reap() == [] and reaper.calls == 0
        clock.now += 1.3
        # The lease has not expired yet (heartbeat 2 s): a call, nothing to do.
        assert reaper.maybe_reap() == [] and reaper.calls == 1
        assert reaper.period == 1.0  # min(heartbeat 2, grace 1) / 2, clamped to >= 1 s
        assert 0.8 <= reaper.seconds_left() <= 1.2
        assert qless_client.jobs[jid].state == "running"
        # Expired, then the grace: two calls (courtesy notice, then back to waiting).
        handled: list[str] = []

        def step() -> bool:
            clock.now += 1.3
            handled.extend(reaper.maybe_reap())
            return qless_client.jobs[jid].state == "waiting"

        wait_until(step, timeout=15, step=0.3)
        assert handled == [jid] and reaper.reaped == 1 and reaper.failures == 0
    finally:
        reaper.close()


def test_an_idle_worker_reaps_at_most_every_30_s(redis_url):
    clock = FakeClock()
    reaper = LeaseReaper(lambda: Client(redis_url), clock=clock)
    try:
        clock.now += 1.3
        assert reaper.maybe_reap(idle=True) == [] and reaper.calls == 1  # the first: at once
        assert reaper.period == 5.0  # the defaults: heartbeat 60, grace 10
        clock.now += 6.5  # past any jittered 5 s
        assert 6.5 < reaper.seconds_left(idle=True) <= 36 - 6.5
        assert reaper.maybe_reap(idle=True) == [] and reaper.calls == 1
        assert reaper.maybe_reap() == [] and reaper.calls == 2  # busy: the engine's period
        clock.now += 36.1
        assert reaper.maybe_reap(idle=True) == [] and reaper.calls == 3
    finally:
        reaper.close()
    fixed = LeaseReaper(lambda: Client(redis_url), period=2.0, clock=clock)
    try:
        clock.now += 1.3
        fixed.maybe_reap(idle=True)
        clock.now += 2.5
        fixed.maybe_reap(idle=True)
        assert fixed.calls == 2  # --reap-interval is kept while idle
    finally:
        fixed.close()


def test_reaper_logs_errors_and_retries_later(redis_url, caplog):
    clock = FakeClock()
    factories: list[Any] = [lambda: Client("unix:///nonexistent/qless.sock", socket_timeout=1)]
    reaper = LeaseReaper(lambda: factories[0](), period=7.0, clock=clock)
    clock.now += 2
    with caplog.at_level(logging.WARNING, logger="django_qless.worker"):
        assert reaper.maybe_reap() == []
    assert reaper.failures == 1 and reaper.calls == 0
    assert "reap failed" in caplog.text
    assert 7.0 * 0.8 <= reaper.seconds_left() <= 7.0 * 1.2  # retried at the next period
    factories[0] = lambda: Client(redis_url)
    clock.now += 9
    assert reaper.maybe_reap() == [] and reaper.calls == 1 and reaper.failures == 1
    reaper.close()


def test_reap_period_follows_the_engine_timing():
    assert reap_period({}) == 5.0  # defaults: heartbeat 60, grace 10
    assert reap_period({"heartbeat": 2, "grace-period": 1}) == 1.0
    assert reap_period({"heartbeat": 600, "grace-period": 600}) == 30.0
    assert reap_period({"heartbeat": 8, "grace-period": 30}) == 4.0
    assert reap_period({"heartbeat": "junk", "grace-period": 0}) == 5.0


def test_reap_interval_option():
    assert WorkerConfig(queues=("q",), reap_interval=0).make_reaper("w").reaps is False  # beats
    fixed = WorkerConfig(queues=("q",), reap_interval=3).make_reaper("w")
    assert fixed is not None and fixed.period == 3 and fixed.fixed_period == 3
    auto = WorkerConfig(queues=("q",)).make_reaper("w")
    assert auto is not None and auto.fixed_period is None
    with pytest.raises(ValueError, match="reap_interval"):
        WorkerConfig(queues=("q",), reap_interval=-1)


def test_reap_interval_from_the_command_line() -> None:
    """`--reap-interval` reaches WorkerConfig; a negative value is refused by the parser."""
    from django_qless.core.worker_cli import build_parser, config_from_args

    parser = build_parser()
    args = parser.parse_args(["--url", "redis://localhost:6379/0", "--reap-interval", "0", "q"])
    assert config_from_args(args).reap_interval == 0
    args = parser.parse_args(["--url", "redis://localhost:6379/0", "q"])
    assert config_from_args(args).reap_interval is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--reap-interval", "-1", "q"])
