"""``enqueue_at``: aware datetimes, naive ones by Django's USE_TZ rule, and epoch seconds."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from django.test import override_settings
from django.utils import timezone

from django_qless.core import InvalidArgument
from django_qless.options import InvalidJobArgument
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def scheduled_at(r, handle) -> float:
    score = r.zscore(f"ql:q:{handle.queue}-scheduled", handle.jid)
    assert score is not None, f"{handle.jid} is not scheduled"
    return float(score)


@pytest.mark.parametrize("offset", [3600, 3600.5])
def test_epoch_seconds_schedule_the_job_at_that_time(r, offset):
    when = time.time() + offset
    handle = jobs.add.enqueue_at(when, 1)
    assert handle.state() == "scheduled"
    assert scheduled_at(r, handle) == pytest.approx(when, abs=2)


def test_epoch_seconds_in_the_past_mean_now():
    assert jobs.add.enqueue_at(time.time() - 60, 1).state() == "waiting"


def test_class_jobs_take_epoch_seconds_too(r):
    when = time.time() + 600
    handle = jobs.Thumbnail.enqueue_at(when, {"path": "a.png"})
    assert scheduled_at(r, handle) == pytest.approx(when, abs=2)


def test_an_aware_datetime_is_that_instant(r):
    when = dt.datetime.now(dt.UTC).astimezone(dt.timezone(dt.timedelta(hours=-5)))
    handle = jobs.add.enqueue_at(when + dt.timedelta(hours=2), 1)
    assert scheduled_at(r, handle) == pytest.approx(time.time() + 7200, abs=2)


@override_settings(USE_TZ=True, TIME_ZONE="UTC")
def test_a_naive_datetime_is_read_in_the_current_time_zone_with_use_tz(r):
    with timezone.override("Asia/Tokyo"):  # UTC+9, no daylight saving
        naive = timezone.localtime().replace(tzinfo=None) + dt.timedelta(hours=1)
        handle = jobs.add.enqueue_at(naive, 1)
    assert scheduled_at(r, handle) == pytest.approx(time.time() + 3600, abs=2)


@override_settings(USE_TZ=False)
def test_a_naive_datetime_is_local_time_without_use_tz(r):
    handle = jobs.add.enqueue_at(dt.datetime.now() + dt.timedelta(hours=1), 1)
    assert scheduled_at(r, handle) == pytest.approx(time.time() + 3600, abs=2)


@pytest.mark.parametrize(("value", "error", "pattern"), [
    (300, InvalidArgument, r"^when is epoch seconds \(a time\), got 300, which is before 2001;"
                           r" for a delay use enqueue_in\(\)$"),
    (float("nan"), InvalidArgument, r"^when must be finite"),
    (True, InvalidJobArgument, r"^when must be a datetime or epoch seconds, got True$"),
    ("tomorrow", InvalidJobArgument, r"^when must be a datetime or epoch seconds"),
    ("in 20 years", InvalidArgument, r"^when must be at most 315360000"),
], ids=["before-2001", "nan", "bool", "text", "in-20-years"])
def test_bad_times_are_refused_before_anything_is_sent(r, value, error, pattern):
    if value == "in 20 years":  # computed here: test ids must not change between runs
        value = time.time() + 20 * 365 * 86400
    with pytest.raises(error, match=pattern):
        jobs.add.enqueue_at(value, 1)
    assert r.keys("ql:j:*") == []
