"""Cron schedules from Django: @job(cron=...), QLESS["SCHEDULE"], sync, CLI, worker start."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.test import override_settings

from django_qless import job
from django_qless.clients import clients, get_client
from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument
from django_qless.schedules import declared_schedules, sync_schedules
from tests.app.helpers import manage
from tests.schedules import django_jobs
from tests.schedules.test_cron_workers import clear_of_the_hour

__all__: list[str] = []

TALLY = {"job": "tests.schedules.django_jobs.tally", "cron": "0 9 * * 1-5",
         "timezone": "Europe/London", "args": ["invoices"], "kwargs": {"limit": 3},
         "missed": "catchup", "catchup": 2}


def _settings(redis_url: str, schedule: dict[str, Any] | None = None) -> Any:
    conf: dict[str, Any] = {"default": {"URL": redis_url}}
    if schedule is not None:
        conf["SCHEDULE"] = schedule
    return override_settings(QLESS=conf)


@pytest.fixture
def qless(redis_url: str) -> Iterator[str]:
    with _settings(redis_url):
        yield redis_url
    clients.close_all()


def _names() -> list[str]:
    return [s.name for s in get_client().schedules.all()]


def test_declared_and_configured_schedules_sync(redis_url: str, qless: str) -> None:
    """@job(cron=...) and QLESS["SCHEDULE"] register; a second sync changes nothing; an
    entry dropped from the settings is removed at the next sync."""
    assert django_jobs.sweep.klass  # (declared at import)
    with _settings(redis_url, {"tally": TALLY}):
        first = sync_schedules()["default"]
        assert sorted(first.created) == ["tally", "tests.schedules.django_jobs.Nightly",
                                         "tests.schedules.django_jobs.sweep"]
        assert sorted(sync_schedules()["default"].unchanged) == sorted(first.created)
        tally = get_client().schedules.get("tally")
        assert tally is not None
        assert (tally.cron, tally.timezone, tally.queue, tally.missed, tally.catchup) == (
            "0 9 * * 1-5", "Europe/London", "cron", "catchup", 2)
        assert tally.data == {"args": ["invoices"], "kwargs": {"limit": 3}}
        nightly = get_client().schedules.get("tests.schedules.django_jobs.Nightly")
        assert nightly is not None and nightly.missed == "skip"
    with _settings(redis_url, {}):
        assert sync_schedules()["default"].removed == ["tally"]
    assert "tally" not in _names()


@pytest.mark.parametrize(("entry", "message"), [
    ({**TALLY, "cron": "0 25 * * *"}, "not valid"),
    ({**TALLY, "timezone": "Europe/Atlantis"}, "unknown time zone"),
    ({**TALLY, "missed": "maybe"}, "missed must be"),
    ({**TALLY, "job": "tests.schedules.django_jobs.nothing"}, "cannot import"),
    ({**TALLY, "job": "json.dumps"}, "not a @job"),
    ({**TALLY, "every": 5}, "unknown keys"),
    ({"job": TALLY["job"]}, "needs 'job'"),
    ({**TALLY, "kwargs": {"nope": 1}}, "nope"),
])
def test_bad_settings_entry_is_refused_before_any_write(
    redis_url: str, qless: str, r: redis.Redis, entry: dict[str, Any], message: str
) -> None:
    """A bad entry names itself and what is wrong; nothing reaches Redis."""
    with _settings(redis_url, {"tally": entry}), pytest.raises(ImproperlyConfigured) as info:
        sync_schedules()
    assert "QLESS['SCHEDULE']['tally']" in str(info.value) and message in str(info.value)
    assert r.keys("ql:r:*") == []


def test_bad_decorator_cron_is_refused_at_import() -> None:
    """`@job(cron=...)` checks the cron text and time zone when the module is imported."""
    with pytest.raises(InvalidArgument, match="not valid"):
        job(cron="every day")(lambda: None)
    with pytest.raises(InvalidArgument, match="unknown time zone"):
        job(cron="@daily", timezone="Nowhere/City")(lambda: None)
    with pytest.raises(TypeError, match="needs cron"):
        job(timezone="UTC")(lambda: None)


def test_cli_lists_and_runs(redis_url: str, qless: str) -> None:
    """`manage.py qless schedules` lists with next runs; `--run` puts a job now."""
    with _settings(redis_url, {"tally": TALLY}):
        out = io.StringIO()
        call_command("qless", "schedules", "--sync", "--json", stdout=out, stderr=io.StringIO())
        rows = {r["name"]: r for r in json.loads(out.getvalue())}
        assert rows["tally"]["upcoming"][0].endswith(("+00:00", "+01:00"))
        assert len(rows["tally"]["upcoming"]) == 3
        with _settings(redis_url, {"tally": {**TALLY, "timezone": "Moon/Base"}}), \
                pytest.raises(CommandError, match="unknown time zone 'Moon/Base'"):
            call_command("qless", "schedules", "--sync", stdout=out)
        out = io.StringIO()
        call_command("qless", "schedules", "--run", "tally", stdout=out)
        assert out.getvalue().strip() == "tally-1"
        assert get_client().queues["cron"].counts["waiting"] == 1


def test_worker_start_registers_without_an_extra_run(redis_url: str) -> None:
    """A worker starting (as at every deploy) registers the schedules; one registered before
    with a tick already due runs that tick once, and registering again adds nothing."""
    schedule = {"tally": {**TALLY, "cron": "0 * * * *", "missed": "once"}}
    # The same schedule registered 3 hours ago: three ticks are due, `once` runs one.
    now = clear_of_the_hour()
    past = Client(redis_url, _clock=lambda: now - 3 * 3600 - 60)
    with _settings(redis_url, schedule):
        spec = [s for s in declared_schedules()["default"] if s.name == "tally"][0]
    past.schedules.add(spec)
    past.close()
    env = {"QLESS_TEST_SCHEDULE": json.dumps(schedule)}
    for duration in ("10", "2"):
        result = manage(redis_url, "qless_worker", "cron", "--processes", "0", "--max-jobs",
                        "1", "--max-duration", duration, **env)
        assert result.returncode == 0, result.stderr
    client = Client(redis_url)
    state = client.schedules.get("tally")
    assert state is not None and state.count == 1
    assert client.jobs["tally-1"].state == "complete"
    # (the module `tally` lives in declares two more with @job(cron=...))
    assert [s.name for s in client.schedules.all()] == [
        "tally", "tests.schedules.django_jobs.Nightly", "tests.schedules.django_jobs.sweep"]
    client.close()


def test_worker_refuses_a_bad_schedule_with_exit_code_2(redis_url: str, r: redis.Redis) -> None:
    """A bad QLESS["SCHEDULE"] stops the worker at start, saying which entry and why."""
    env = {"QLESS_TEST_SCHEDULE": json.dumps({"tally": {**TALLY, "cron": "0 9 * *"}})}
    result = manage(redis_url, "qless_worker", "cron", "--processes", "0", "--max-jobs", "1",
                    **env)
    assert result.returncode == 2
    assert "QLESS['SCHEDULE']['tally']: cron '0 9 * *' is not valid" in result.stderr
    assert "Traceback" not in result.stderr
    assert r.keys("ql:r:*") == []
