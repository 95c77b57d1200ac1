"""Cron schedules from the core: ticks, DST, re-registration, missed ticks, sync, run now."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.scheduling import schedules
from django_qless.core.scheduling.schedules import TICKS, CronSchedule, keep_schedules
from tests.schedules.conftest import Clock, drain

__all__: list[str] = []

PARIS = "Europe/Paris"


def _local(when: float, zone: str = PARIS) -> str:
    return datetime.fromtimestamp(when, ZoneInfo(zone)).isoformat()


def _walk(client: Client, clock: Clock, start: float, end: float, step: float = 600
          ) -> list[tuple[str, float]]:
    """Move the clock from `start` to `end` by `step`, popping at every stop (a busy worker)."""
    spawned = []
    clock.at = start
    while clock.at <= end:
        spawned += drain(client)
        clock.at += step
    return spawned


def test_register_twice_changes_nothing(client: Client, clock: Clock, r: redis.Redis) -> None:
    """The second registration reports "unchanged", writes nothing and spawns nothing."""
    clock.set(PARIS, 2026, 6, 1, 11, 50)
    assert client.schedules.register("report", "app.Report", cron="0 12 * * *", queue="q",
                                     timezone=PARIS) == "created"
    before = {k: r.dump(k) for k in r.keys("ql:r*")}
    clock.at += 60
    assert client.schedules.register("report", "app.Report", cron="0 12 * * *", queue="q",
                                     timezone=PARIS) == "unchanged"
    assert {k: r.dump(k) for k in r.keys("ql:r*")} == before
    assert drain(client) == []
    state = client.schedules.get("report")
    assert state is not None and state.next_run == clock.set(PARIS, 2026, 6, 1, 12, 0)
    assert state.stored == TICKS
    assert [jid for jid, _ in drain(client)] == ["report-1"]


@pytest.mark.parametrize(("night", "expected"), [
    # Clocks skip 02:00-03:00: the 02:30 run happens once, at 03:00.
    ((2026, 3, 28), ["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    # 02:00-03:00 happens twice: the 02:30 run happens once, at its first occurrence.
    ((2026, 10, 24), ["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
], ids=["spring-forward", "fall-back"])
def test_daylight_saving_nights_run_once(client: Client, clock: Clock,
                                         night: tuple[int, int, int], expected: list[str]
                                         ) -> None:
    """A 02:30 Paris job over the two DST nights of 2026, a pop every 5 minutes."""
    start = clock.set(PARIS, *night, 12, 0)
    client.schedules.register("nightly", "app.N", cron="30 2 * * *", queue="q", timezone=PARIS)
    ran = _walk(client, clock, start, start + 2 * 86400, step=300)
    assert [_local(t) for _, t in ran] == expected


def test_wildcard_hour_runs_in_both_repeated_hours(client: Client, clock: Clock) -> None:
    """A `*/30 * * * *` schedule is a period: it runs every 30 min of elapsed time."""
    start = clock.set(PARIS, 2026, 10, 25, 1, 15)
    client.schedules.register("half", "app.H", cron="*/30 * * * *", queue="q", timezone=PARIS)
    end = clock.set(PARIS, 2026, 10, 25, 3, 10)
    ran = _walk(client, clock, start, end, step=60)
    times = [t for _, t in ran]
    assert len(times) == 6 and all(b - a == 1800 for a, b in zip(times, times[1:], strict=False))


@pytest.mark.parametrize(("missed", "expected"), [("skip", 0), ("once", 1), ("catchup", 3)])
def test_missed_ticks_policy(client: Client, clock: Clock, missed: str, expected: int) -> None:
    """After 10 hours with no pop: skip runs none, once runs the latest, catchup the latest 3."""
    start = clock.set("UTC", 2026, 6, 1, 0, 30)
    client.schedules.register("hourly", "app.H", cron="0 * * * *", queue="q", missed=missed,
                              catchup=3)
    clock.at = start + 10 * 3600 + 600  # 10:40: ticks 01:00 .. 10:00 missed
    ran = drain(client)
    assert len(ran) == expected
    if ran:
        assert ran[-1][1] == clock.set("UTC", 2026, 6, 1, 10, 0)
    clock.set("UTC", 2026, 6, 1, 11, 0)
    assert len(drain(client)) == 1  # the next tick runs whatever the policy


def test_skip_runs_a_tick_within_grace(client: Client, clock: Clock) -> None:
    """`skip` still runs a tick popped at most `grace` seconds late."""
    clock.set("UTC", 2026, 6, 1, 0, 30)
    client.schedules.register("hourly", "app.H", cron="0 * * * *", queue="q", missed="skip",
                              grace=120)
    clock.set("UTC", 2026, 6, 1, 1, 1)
    assert len(drain(client)) == 1


def test_one_job_per_tick_across_workers(redis_url: str, client: Client, clock: Clock) -> None:
    """Many workers popping at the tick: exactly one child."""
    clock.set("UTC", 2026, 6, 1, 0, 59)
    client.schedules.register("m", "app.M", cron="0 * * * *", queue="q")
    clock.set("UTC", 2026, 6, 1, 1, 0)
    workers = [Client(redis_url, worker_name=f"w{i}", _clock=clock) for i in range(4)]
    try:
        got = [w.queues["q"].pop() for w in workers for _ in range(2)]
    finally:
        for w in workers:
            w.close()
    assert [j.jid for j in got if j is not None] == ["m-1"]


def test_changed_cron_takes_effect_without_a_run(client: Client, clock: Clock) -> None:
    """A new cron text replaces the stored ticks; registering it spawns nothing."""
    clock.set("UTC", 2026, 6, 1, 0, 50)
    client.schedules.register("m", "app.M", cron="0 * * * *", queue="q")
    clock.set("UTC", 2026, 6, 1, 0, 55)
    assert client.schedules.register("m", "app.M", cron="30 * * * *", queue="q",
                                     data={"v": 2}) == "changed"
    assert drain(client) == []
    clock.set("UTC", 2026, 6, 1, 1, 10)
    assert drain(client) == []  # 01:00 belonged to the old text
    clock.set("UTC", 2026, 6, 1, 1, 30)
    job = client.queues["q"].pop()
    assert job is not None and job.data == {"v": 2}


def test_changed_queue_moves_the_schedule(client: Client, clock: Clock) -> None:
    """A schedule moved to another queue spawns there, once."""
    clock.set("UTC", 2026, 6, 1, 0, 50)
    client.schedules.register("m", "app.M", cron="0 * * * *", queue="q")
    client.schedules.register("m", "app.M", cron="0 * * * *", queue="other")
    clock.set("UTC", 2026, 6, 1, 1, 0)
    assert drain(client) == []
    assert [jid for jid, _ in drain(client, "other")] == ["m-1"]


def test_sync_removes_undeclared(client: Client, clock: Clock, r: redis.Redis) -> None:
    """The full set registered: missing names are removed, the rest kept or updated."""
    keep = CronSchedule.build("keep", "app.K", cron="@daily", queue="q")
    gone = CronSchedule.build("gone", "app.G", cron="@hourly", queue="q")
    report = client.schedules.sync([keep, gone])
    assert sorted(report.created) == ["gone", "keep"]
    report = client.schedules.sync([keep])
    assert (report.unchanged, report.removed) == (["keep"], ["gone"])
    assert [s.name for s in client.schedules.all()] == ["keep"]
    assert not r.exists("ql:r:gone", "ql:rt:gone")
    assert r.zrange("ql:q:q-recur", 0, -1) == ["keep"]


def test_ticks_are_topped_up(
    client: Client, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once half the ticks are used, a worker's top-up hands over more; none run twice."""
    # (the top-up runs once per KEEP_EVERY per process: an earlier test here may have run it)
    monkeypatch.setattr(schedules, "_kept_at", [])
    clock.set("UTC", 2026, 6, 1, 0, 0)
    client.schedules.register("m", "app.M", cron="* * * * *", queue="q")
    ran = _walk(client, clock, clock.at, clock.at + 40 * 60, step=60)
    assert client.schedules.get("m").stored == TICKS - 40  # type: ignore[union-attr]
    keep_schedules(client)
    assert client.schedules.get("m").stored > TICKS - 40  # type: ignore[union-attr]
    ran += _walk(client, clock, clock.at, clock.at + 60 * 60, step=60)
    times = [t for _, t in ran]
    assert len(times) == len(set(times)) == 101 and times == sorted(times)


def test_run_now(client: Client, clock: Clock) -> None:
    """`run_now` puts one child at once and leaves the ticks alone."""
    clock.set("UTC", 2026, 6, 1, 0, 10)
    client.schedules.register("m", "app.M", cron="0 * * * *", queue="q", data={"a": 1})
    jid = client.schedules.run_now("m")
    job = client.queues["q"].pop()
    assert job is not None and job.jid == jid == "m-1" and job.data == {"a": 1}
    assert client.schedules.get("m").next_run == clock.set("UTC", 2026, 6, 1, 1, 0)  # type: ignore[union-attr]
    with pytest.raises(InvalidArgument, match="no cron schedule"):
        client.schedules.run_now("nope")


@pytest.mark.parametrize(("options", "message"), [
    ({"cron": "61 * * * *"}, "not valid"),
    ({"cron": "* * * *"}, "five fields"),
    ({"cron": "0 0 * * * *"}, "five fields"),
    ({"cron": "@often"}, "aliases"),
    ({"cron": "0 0 30 2 *"}, "never fires"),
    ({"timezone": "Mars/Olympus"}, "unknown time zone"),
    ({"missed": "twice"}, "missed must be"),
    ({"catchup": 0}, "catchup"),
    ({"queue": "bad queue"}, "queue"),
    ({"data": [1]}, "data"),
])
def test_bad_input_writes_nothing(client: Client, r: redis.Redis, options: dict[str, object],
                                  message: str) -> None:
    """Every bad field is refused with a message naming it, before anything is written."""
    kwargs: dict[str, object] = {"cron": "@daily", "queue": "q", **options}
    with pytest.raises(InvalidArgument, match=message):
        client.schedules.register("m", "app.M", **kwargs)
    assert r.keys("*") == []


def test_names_shared_with_interval_jobs_are_refused(client: Client) -> None:
    """A cron schedule never overwrites an interval recurring job of the same jid."""
    client.queues["q"].recur("app.M", {}, 60, jid="m")
    with pytest.raises(QlessError, match="interval schedule"):
        client.schedules.register("m", "app.M", cron="@daily", queue="q")


def test_remove(client: Client, r: redis.Redis) -> None:
    """Remove deletes the template, its ticks and its refill entry."""
    client.schedules.register("m", "app.M", cron="@daily", queue="q")
    assert client.schedules.remove("m") is True
    assert client.schedules.remove("m") is False
    assert not r.exists("ql:r:m", "ql:rt:m") and r.zcard("ql:crons") == 0
