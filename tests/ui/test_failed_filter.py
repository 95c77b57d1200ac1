"""The Failed group page filtered by queue and day (querystring form, cursor paging)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.helpers import client_at

NOV1 = dt.datetime(2026, 11, 1, 12, tzinfo=dt.UTC).timestamp()
NOV3 = dt.datetime(2026, 11, 3, 12, tzinfo=dt.UTC).timestamp()


def fail_at(qc: Any, queue: str, when: float, group: str = "boom.Error") -> str:
    """Put, pop and fail a job whose failure is recorded at `when`."""
    client = client_at(qc.redis, when)
    jid = client.queues[queue].put("tests.Job", {"n": 1}, priority=2147483647)
    job = client.queues[queue].pop()
    assert job is not None and job.jid == jid
    job.fail(group, "boom")
    return jid


def group_url(query: str = "") -> str:
    return reverse("django_qless:failed_group", args=["boom.Error"]) + query


def shown(response: Any) -> list[str]:
    body = response.content.decode()
    return [part.split('"', 1)[0] for part in body.split('<tr data-jid="')[1:]]


def test_filter_by_queue_and_days(mc: Client, qc: Any) -> None:
    a1, b1 = fail_at(qc, "a", NOV1), fail_at(qc, "b", NOV1)
    a3, b3 = fail_at(qc, "a", NOV3), fail_at(qc, "b", NOV3)
    assert shown(mc.get(group_url())) == [b3, a3, b1, a1]
    assert shown(mc.get(group_url("?queue=a"))) == [a3, a1]
    assert shown(mc.get(group_url("?since=2026-11-02"))) == [b3, a3]
    assert shown(mc.get(group_url("?queue=b&until=2026-11-01"))) == [b1]
    page = mc.get(group_url("?queue=a&since=2026-11-01&until=2026-11-03")).content.decode()
    assert 'name="queue" value="a"' in page and "clear</a>" in page
    assert "data-live-src" not in page.split('id="qless"', 1)[1].split("<table", 1)[1][:80]


def test_filtered_pages_follow_a_cursor(mc: Client, qc: Any) -> None:
    jids = [fail_at(qc, "a", NOV1 + n) for n in range(27)]
    first = mc.get(group_url("?queue=a"))
    assert shown(first) == jids[::-1][:25]
    body = first.content.decode()
    next_url = body.split('rel="next"', 1)[0].rsplit('href="', 1)[1].split('"', 1)[0]
    assert "after=25" in next_url and "queue=a" in next_url
    second = mc.get(next_url.replace("&amp;", "&"))
    assert shown(second) == jids[::-1][25:]
    assert 'rel="next"' not in second.content.decode()


def test_a_bad_filter_is_a_message_on_the_same_page(mc: Client, qc: Any) -> None:
    jid = fail_at(qc, "a", NOV1)
    for query in ("?queue=bad%20queue", "?since=yesterday", "?since=2026-11-05&until=2026-11-01"):
        response = mc.get(group_url(query))
        assert response.status_code == 200
        texts = [str(m) for m in get_messages(response.wsgi_request)]
        assert len(texts) == 1 and texts[0].startswith("Filter not applied: "), texts
        assert "Filter not applied: " in response.content.decode()
        assert shown(response) == [jid]  # the unfiltered list


def test_a_garbage_cursor_starts_from_the_newest(mc: Client, qc: Any) -> None:
    jid = fail_at(qc, "a", NOV1)
    assert shown(mc.get(group_url("?queue=a&after=xyz"))) == [jid]
