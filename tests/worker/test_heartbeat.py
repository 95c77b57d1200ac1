"""The heartbeat thread (lazy hand-off, parking when idle) and the child's status lines."""

from __future__ import annotations

import time
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.registry import TimeLimits
from django_qless.core.workers.child import parse_status_line, status_line
from django_qless.core.workers.heartbeat import Heartbeater
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(60)


class Told:
    """What a heartbeat thread told its watcher (the job loop's side of it)."""

    def __init__(self) -> None:
        self.lost: list[tuple[str, str]] = []
        self.ticks: list[float] = []
        self.fired: list[tuple[str, str]] = []

    def on_lock_lost(self, job: Any, why: str) -> None:
        self.lost.append((job.jid, why))

    def noticed(self, job: Any, what: str, elapsed: float) -> None:
        if what == "tick":
            self.ticks.append(elapsed)
        elif what != "long":
            self.fired.append((job.jid, what))


@pytest.fixture
def held(redis_url: str) -> Any:
    """A job popped by this test (heartbeat 1 s), and the client holding it."""
    client = Client(redis_url, worker_name="hb-test")
    client.config["heartbeat"] = 1
    client.queues["q"].put("tests.worker.jobs.noop", {})
    job = client.queues["q"].pop()
    assert job is not None
    yield client, job
    client.close()


def test_heartbeats_a_long_job_and_parks_when_idle(held):
    client, job = held
    told = Told()
    beater = Heartbeater(told, check=0.02, park_after=0.2)
    beater.start()
    try:
        wait_until(lambda: beater._parked, timeout=5)  # idle from the start: parked
        expires = float(client.jobs[job.jid].expires_at)
        beater.watch(job)
        wait_until(lambda: told.ticks, timeout=2)
        assert told.ticks[0] < 0.5  # noticed (title) within its check interval, not after 1 s
        time.sleep(1.6)  # beats every ~1/3 s for a 1 s lease
        assert beater.beats >= 2 and not told.lost
        assert float(client.jobs[job.jid].expires_at) > expires + 1.0
        beater.unwatch()
        wait_until(lambda: beater._parked, timeout=5)
        beats = beater.beats
        time.sleep(0.5)
        assert beater.beats == beats  # parked: no beat for a job that is not watched
        assert client.jobs[job.jid].state == "running"
    finally:
        beater.stop()
        beater.join(5)
    assert not beater.is_alive()


def test_refused_heartbeat_reports_the_lost_lock(held):
    client, job = held
    told = Told()
    beater = Heartbeater(told, check=0.02)
    beater.start()
    try:
        beater.watch(job)
        client.jobs[job.jid].cancel()
        wait_until(lambda: told.lost, timeout=5)
        assert told.lost[0][0] == job.jid
    finally:
        beater.stop()
        beater.join(5)


def test_time_limits_fire_once_each_for_the_watched_job(held):
    _, job = held
    told = Told()
    fired = told.fired
    beater = Heartbeater(told, check=0.02)
    beater.start()
    try:
        started = time.monotonic()
        beater.watch(job, TimeLimits(0.3, 0.1))
        wait_until(lambda: len(fired) == 2, timeout=5)
        assert 0.25 <= time.monotonic() - started < 1.0
        time.sleep(0.4)
        assert fired == [(job.jid, "soft"), (job.jid, "timeout")]
        beater.unwatch()
        beater.watch(job, TimeLimits(0.3))  # a new watch is a new job: its own time limits
        wait_until(lambda: len(fired) == 3, timeout=5)
        assert fired[2] == (job.jid, "timeout")
    finally:
        beater.stop()
        beater.join(5)


def test_status_lines_round_trip_and_cannot_be_split_by_a_klass():
    line = status_line("s", "abc123", "q.high", "app.jobs.Weird\tName\nwith breaks")
    assert line.count("\n") == 1 and line.endswith("\n")
    event, fields = parse_status_line(line[:-1].encode())
    assert event == "s"
    assert fields == ["abc123", "q.high", "app.jobs.Weird Name with breaks"]
    assert parse_status_line(status_line("e", "abc123", "complete")[:-1].encode()) == (
        "e", ["abc123", "complete"])
