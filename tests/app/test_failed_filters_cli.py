"""`manage.py qless list Q --state failed --group G [--since] [--until]`: filters that apply."""

from __future__ import annotations

import datetime as dt
import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_qless.clients import get_client
from tests.app.helpers import manage
from tests.helpers import client_at

pytestmark = pytest.mark.django_db(transaction=True)

NOV1 = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()
NOV3 = dt.datetime(2026, 11, 3, 12, tzinfo=dt.UTC).timestamp()


def fail_at(queue: str, when: float, group: str = "boom") -> str:
    client = client_at(get_client().redis, when)
    jid = client.queues[queue].put("tests.app.jobs.add", {"args": [1], "kwargs": {}})
    job = client.queues[queue].pop()
    assert job is not None and job.jid == jid
    job.fail(group, "kaput")
    return jid


def qless(*args: str) -> dict:
    out = StringIO()
    call_command("qless", *args, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


@pytest.fixture
def failed() -> dict[str, str]:
    return {"a1": fail_at("a", NOV1), "b1": fail_at("b", NOV1), "a3": fail_at("a", NOV3),
            "b3": fail_at("b", NOV3)}


def test_the_queue_argument_filters_failed_jobs(failed):
    reply = qless("list", "a", "--state", "failed", "--group", "boom")
    assert reply == {"jids": [failed["a3"], failed["a1"]], "total": None, "next": None}


def test_days_filter_failed_jobs_until_including_its_day(failed):
    reply = qless("list", "--state", "failed", "--group", "boom", "--since", "2026-11-02")
    assert reply["jids"] == [failed["b3"], failed["a3"]]
    reply = qless("list", "b", "--state", "failed", "--group", "boom", "--until", "2026-11-01")
    assert reply["jids"] == [failed["b1"]]
    reply = qless("list", "--state", "failed", "--group", "boom", "--since", str(int(NOV3)),
                  "--until", "2026-11-03T13:00:00")
    assert reply["jids"] == [failed["b3"], failed["a3"]]


def test_the_cursor_continues_a_filtered_listing(failed):
    first = qless("list", "a", "--state", "failed", "--group", "boom", "--count", "1")
    assert first["jids"] == [failed["a3"]] and first["next"] == 2
    rest = qless("list", "a", "--state", "failed", "--group", "boom", "--count", "1",
                 "--offset", str(first["next"]))
    assert rest["jids"] == [failed["a1"]]


def test_bad_times_and_misplaced_filters_are_one_line_errors(redis_url):
    with pytest.raises(CommandError, match="apply to --state failed only"):
        qless("list", "a", "--since", "2026-11-01")
    result = manage(redis_url, "qless", "list", "a", "--state", "failed", "--group", "boom",
                    "--since", "last tuesday")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "expected epoch seconds, YYYY-MM-DD or an ISO datetime" in result.stderr


def test_text_output_says_how_to_continue(failed, redis_url):
    result = manage(redis_url, "qless", "list", "a", "--state", "failed", "--group", "boom",
                    "--count", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == failed["a3"]
    assert result.stderr.strip() == "more: --offset 2"
