"""Registering a recurring job again (every deploy) never spawns an extra child."""

from __future__ import annotations

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import QlessError
from tests.schedules.conftest import Clock

__all__: list[str] = []


def _register(client: Client, **changes: object) -> str:
    """Register the deploy's recurring job `tick` (30 s), as docs/django.md advises."""
    options: dict[str, object] = {"interval": 30.0, "jid": "tick", "data": {"n": 1}}
    options.update(changes)
    data = options.pop("data")
    interval = options.pop("interval")
    return client.queues["q"].recur("app.Tick", data, interval, **options)  # type: ignore[arg-type]


def _drain(client: Client) -> list[str]:
    """Pop and complete every job the queue offers now; return their jids."""
    jids = []
    while (job := client.queues["q"].pop()) is not None:
        jids.append(job.jid)
        job.complete()
    return jids


def test_identical_registration_runs_no_extra_job(client: Client, clock: Clock,
                                                  r: redis.Redis) -> None:
    """Run count stays 1 over three registrations within 3 s of a 30 s interval."""
    _register(client)
    assert _drain(client) == ["tick-1"]
    before = r.hgetall("ql:r:tick")
    for _ in range(3):
        clock.at += 1
        assert _register(client) == "tick"
        assert _drain(client) == []
    assert r.hgetall("ql:r:tick") == before
    assert client.jobs.recurring("tick").count == 1  # type: ignore[union-attr]
    clock.at += 27
    assert _drain(client) == ["tick-2"]


def test_changed_registration_updates_without_extra_run(client: Client, clock: Clock) -> None:
    """New data reaches the next child; the next run stays where the schedule put it."""
    _register(client)
    assert _drain(client) == ["tick-1"]
    clock.at += 5
    _register(client, data={"n": 2}, priority=3)
    assert _drain(client) == []
    clock.at += 25
    job = client.queues["q"].pop()
    assert job is not None and job.jid == "tick-2" and job.data == {"n": 2}


def test_changed_interval_shifts_next_run(client: Client, clock: Clock) -> None:
    """A longer interval moves the next run by the difference."""
    _register(client)
    assert _drain(client) == ["tick-1"]
    _register(client, interval=60.0)
    clock.at += 59
    assert _drain(client) == []
    clock.at += 1
    assert _drain(client) == ["tick-2"]


def test_moved_queue_keeps_next_run(client: Client, clock: Clock) -> None:
    """A template moved to another queue spawns there at its old next run, not at once."""
    _register(client)
    assert _drain(client) == ["tick-1"]
    clock.at += 2
    client.queues["other"].recur("app.Tick", {"n": 1}, 30.0, jid="tick")
    assert client.queues["other"].pop() is None
    clock.at += 28
    child = client.queues["other"].pop()
    assert child is not None and child.jid == "tick-2"


def test_recur_over_a_cron_schedule_is_refused(client: Client, r: redis.Redis) -> None:
    """A recurring jid that names a cron schedule is not silently turned into an interval."""
    r.hset("ql:r:tick", mapping={"type": "cron", "queue": "q"})
    with pytest.raises(QlessError, match="cron schedule"):
        _register(client)
