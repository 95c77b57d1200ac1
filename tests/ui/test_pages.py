"""What the pages and the JSON/metrics endpoints show."""

from __future__ import annotations

import json
import re
from typing import Any

from django.test import Client
from django.urls import reverse

from tests.ui.conftest import TOKEN, fail_job, pop_job


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def content(response: Any) -> str:
    return response.content.decode().split('id="qless"', 1)[1]


def test_overview_counts(mc: Client, qc: Any) -> None:
    for _ in range(3):
        qc.queues["alpha"].put("tests.Job", {})
    qc.queues["alpha"].put("tests.Job", {}, delay=600)
    qc.queues["beta"].put("tests.Job", {})
    pop_job(qc, "beta")
    qc.queues["beta"].pause()
    fail_job(qc, "alpha", group="grp.One")
    body = content(mc.get(url("overview")))
    alpha = re.search(r'queues/alpha/">alpha</a></td>\s*<td>(\d+)</td><td>(\d+)</td><td>(\d+)',
                      body)
    assert alpha and alpha.groups() == ("0", "3", "1")
    beta = body.split('queues/beta/">beta</a>')[1].split("</tr>")[0]
    assert "<td>1</td>" in beta and "paused" in beta
    assert "grp.One" in body and url("failed_group", "grp.One") in body
    assert url("worker", "w1") in body


def test_overview_throughput_counts_recent_completions(mc: Client, qc: Any) -> None:
    for _ in range(4):
        qc.queues["q"].put("tests.Job", {})
    for _ in range(4):
        pop_job(qc).complete()
    data = mc.get(url("api_overview")).json()
    assert data["completed_last_hour"] == 4
    assert len(data["completed_per_minute"]) == 60 and data["completed_per_minute"][-1] == 4


def test_queue_page_stats_and_histograms(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    pop_job(qc).complete()
    page = mc.get(url("queue", "q"))
    body = content(page)
    assert page.status_code == 200
    assert body.count("<svg class=\"qless-hist\"") == 2
    assert "<th>Wait</th><td>1</td>" in body and "<th>Run</th><td>1</td>" in body
    # One wait bar and one run bar (one clock for put, pop and complete: no negative spans).
    assert body.count('class="qless-bar"') == 2


def test_queue_stats_for_another_day_and_bad_date(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    pop_job(qc).complete()
    old = content(mc.get(url("queue", "q") + "?date=2001-02-03"))
    assert "2001-02-03" in old and "<th>Run</th><td>0</td>" in old
    for value in ("not-a-date", "0001-01-01", "9999-12-31", "2001-02-30"):
        bad = mc.get(url("queue", "q") + "?date=" + value, follow=True)
        assert bad.status_code == 200 and b"Showing today instead" in bad.content, value


def test_queue_tabs_paginate(mc: Client, qc: Any) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}, priority=100 - i) for i in range(30)]
    first = content(mc.get(url("queue_tab", "q", "waiting")))
    second = content(mc.get(url("queue_tab", "q", "waiting") + "?page=2"))
    assert all(j in first for j in jids[:25]) and jids[25] not in first
    assert all(j in second for j in jids[25:]) and jids[0] not in second
    assert "page 1 of 2" in first
    assert mc.get(url("queue_tab", "q", "waiting") + "?page=abc").status_code == 200
    assert mc.get(url("queue_tab", "q", "waiting") + "?page=-5").status_code == 200


def test_scheduled_depends_recurring_tabs(mc: Client, qc: Any) -> None:
    later = qc.queues["q"].put("tests.Job", {}, delay=300)
    dep = qc.queues["q"].put("tests.Job", {}, depends=[later])
    qc.queues["q"].recur("tests.Job", {}, 30, jid="tick")
    assert later in content(mc.get(url("queue_tab", "q", "scheduled")))
    assert dep in content(mc.get(url("queue_tab", "q", "depends")))
    recurring = content(mc.get(url("queue_tab", "q", "recurring")))
    assert url("recurring_detail", "tick") in recurring
    assert url("recurring_detail", "tick") in content(mc.get(url("recurring")))


def test_job_page_shows_everything(mc: Client, qc: Any) -> None:
    jid = fail_job(qc, data={"user": 7, "items": [1, 2]}, tags=("billing",),
                   message="Traceback (most recent call last):\n  File x\nKeyError: 'k'")
    qc.jobs[jid].log("charged card", {"amount": 5})
    body = content(mc.get(url("job", jid)))
    assert "&quot;items&quot;: [" in body and "&quot;user&quot;: 7" in body
    assert "KeyError: &#x27;k&#x27;" in body and "Traceback (most recent call last)" in body
    assert "billing" in body and url("tag", "billing") in body
    assert "charged card" in body and "amount=5" in body
    assert "popped" in body and "worker=w1" in body
    assert url("failed_group", "boom.Error") in body


def test_job_page_running_job_shows_lock_and_timeout(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    pop_job(qc)
    body = content(mc.get(url("job", jid)))
    assert "Lock expires in" in body and url("job_timeout", jid) in body


def test_tag_search(mc: Client, qc: Any) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}, tags=["hot"]) for _ in range(3)]
    found = mc.get(url("tags") + "?tag=hot")
    assert found.status_code == 302 and found["Location"] == url("tag", "hot")
    body = content(mc.get(url("tag", "hot")))
    assert all(j in body for j in jids)
    assert re.search(r'Jobs tagged <code>hot</code>: <span data-live-text="total">3<', body)
    top = content(mc.get(url("tags")))
    assert url("tag", "hot") in top
    bad = mc.get(url("tags") + "?tag=" + "x" * 80, follow=True)
    assert bad.status_code == 200 and b"longer than 64" in bad.content


def test_tracked_and_completed_and_workers(mc: Client, qc: Any) -> None:
    tracked = qc.queues["q"].put("tests.Job", {})
    qc.jobs[tracked].track()
    other = qc.queues["q"].put("tests.Job", {})
    pop_job(qc, worker="w9")
    body = content(mc.get(url("tracked")))
    assert tracked in body and other not in body
    assert tracked in content(mc.get(url("tracked") + "?state=running"))
    assert tracked not in content(mc.get(url("tracked") + "?state=waiting"))
    assert url("worker", "w9") in content(mc.get(url("workers")))
    assert tracked in content(mc.get(url("worker", "w9")))
    assert mc.get(url("worker", "ghost")).status_code == 404
    qc.jobs[tracked].untrack()
    job = qc.jobs[tracked]
    job.client.redis  # noqa: B018 - the job is owned by w9; complete it as that worker
    from django_qless.core.client import Client as CoreClient

    CoreClient(qc.redis, worker_name="w9").jobs[tracked].complete()
    assert tracked in content(mc.get(url("completed")))


def test_json_api_shapes(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {"a": 1}, tags=["t"])
    fail_job(qc)
    overview = mc.get(url("api_overview")).json()
    assert overview["queues"][0]["name"] == "q" and overview["queues"][0]["waiting"] == 1
    assert overview["failed_groups"] == [{"group": "boom.Error", "count": 1}]
    tab = mc.get(url("api_queue_tab", "q", "waiting")).json()
    assert tab["jobs"][0]["jid"] == jid and tab["jobs"][0]["tags"] == ["t"]
    job = mc.get(url("api_job", jid)).json()["job"]
    assert json.loads(job["data"]) == {"a": 1} and job["history"][0]["what"] == "put"
    assert mc.get(url("api_failed")).json()["total"] == 1
    assert mc.get(url("api_failed_group", "boom.Error")).json()["total"] == 1
    assert mc.get(url("api_queue", "q")).json()["counts"]["waiting"] == 1
    assert mc.get(url("api_queues")).json()["queues"][0]["state"] == "active"
    assert mc.get(url("api_workers")).json()["total"] == 1
    assert mc.get(url("api_tracked")).json()["jobs"] == []
    assert mc.get(url("api_completed")).json()["jobs"] == []
    tags = mc.get(url("api_tags")).json()
    assert (tags["tags"], tags["counts"]) == ([], {}) and tags["version"]
    assert mc.get(url("api_worker", "w1")).json()["name"] == "w1"


def test_metrics_exposition(qc: Any, db: None) -> None:
    qc.queues["q"].put("tests.Job", {})
    fail_job(qc, group='odd "group"\\x')
    body = Client().get(url("metrics"), HTTP_AUTHORIZATION=f"Bearer {TOKEN}").content.decode()
    assert 'qless_queue_jobs{queue="q",state="waiting"} 1' in body
    assert 'qless_failed_jobs{group="odd \\"group\\"\\\\x"} 1' in body
    assert "qless_workers 1" in body
    assert 'qless_workers_by_state{state="live"} 1' in body  # (the worker fail_job used)
    assert 'qless_workers_by_state{state="dead"} 0' in body
    assert 'qless_stats_failures_today{queue="q"} 1' in body
    assert "# TYPE qless_queue_jobs gauge" in body
    for line in body.splitlines():
        assert line.startswith("#") or re.match(r'^[a-z_]+(\{.*\})? -?[0-9.e+-]+$', line), line


def test_error_pages_keep_the_admin_chrome(mc: Client) -> None:
    response = mc.get(url("job", "nope"))
    assert response.status_code == 404
    assert b'id="site-name"' in response.content and b"qless.css" in response.content


def test_event_stream_relays_engine_events(mc: Client, qc: Any) -> None:
    response = mc.get(url("api_events"))
    assert response["Content-Type"].startswith("text/event-stream")
    chunks = iter(response.streaming_content)
    assert next(chunks) == b"retry: 2000\n\n"  # subscribed from here on
    jid = qc.queues["q"].put("tests.Job", {}, tags=["<b>x</b>"])
    got = b""
    for chunk in chunks:
        got += chunk
        if jid.encode() in got:
            break
    event = got.decode().split("event: qless\ndata: ", 1)[1].split("\n\n", 1)[0]
    payload = json.loads(event)
    assert (payload["event"], payload["jid"], payload["queue"]) == ("put", jid, "q")
    response.close()


def test_events_page(mc: Client) -> None:
    body = content(mc.get(url("events")))
    assert f'data-events-src="{url("api_events")}"' in body


def test_overview_caps_lists_and_failed_page_paginates(mc: Client, qc: Any) -> None:
    for i in range(30):
        fail_job(qc, "q", group=f"grp{i:02d}", worker=f"w{i:02d}")
    body = content(mc.get(url("overview")))
    assert body.count(url("failed_group", "grp00")[:-2]) == 10
    assert "All 30 failure groups" in body and "All 30 workers" in body
    first = content(mc.get(url("failed")))
    second = content(mc.get(url("failed") + "?page=2"))
    assert first.count('href="/qless/failed/group/') == 25
    assert second.count('href="/qless/failed/group/') == 5
    api = mc.get(url("api_overview")).json()
    assert len(api["failed_groups"]) == 10 and api["failed_group_count"] == 30
    assert api["worker_count"] == 30


def test_throttle_lookup_of_a_bad_id_is_not_a_500(mc: Client, qc: Any) -> None:
    response = mc.get(url("throttles") + "?id=%01bad")
    assert response.status_code in (200, 400)
    assert response["Content-Security-Policy"]
