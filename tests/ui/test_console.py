"""The operator's console pages, server side: workers, search, charts, Redis, forgetting."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

import pytest
from django.test import Client, override_settings
from django.urls import reverse

from django_qless.core.client import Client as CoreClient
from django_qless.core.console import bucket_bounds, find_by_klass, histogram_percentiles
from django_qless.views.console import bar_chart
from tests.ui.conftest import XSS_PROBES, fail_job, pop_job


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def body(response: Any) -> str:
    assert response.status_code == 200, response.content[:400]
    return str(response.content.decode())


def test_percentiles_are_bucket_upper_bounds() -> None:
    hist = [0] * 148
    hist[0], hist[5], hist[61] = 50, 45, 5  # 50 under 1 s, 45 in 5-6 s, 5 in 2-3 min
    assert histogram_percentiles(hist) == {50: 1.0, 95: 6.0, 99: 180.0}
    assert histogram_percentiles([0] * 148) == {50: None, 95: None, 99: None}
    assert [bucket_bounds(i) for i in (59, 60, 118, 119, 141, 142)] == [
        60.0, 120.0, 3600.0, 7200.0, 86400.0, 172800.0]


def test_bar_chart_scales_to_the_peak() -> None:
    chart = bar_chart([0, 5, 10], ["a", "b", "c"], width=300, height=114)
    assert chart["peak"] == 10 and chart["total"] == 15
    assert [b["h"] for b in chart["bars"]] == [0.0, 50.0, 100.0]


def test_workers_page_shows_liveness_stale_and_dead(mc: Client, qc: Any) -> None:
    live = CoreClient(qc.redis, worker_name="w-live", _clock=qc.now)
    live.workers.hello("w-live", "host-1", 321, ["q", "q2"])
    qc.queues["q"].put("tests.Job", {}, jid="j1")
    live.reserve(["q"])
    late = CoreClient(qc.redis, worker_name="w-late", _clock=lambda: qc.now() - 100)
    late.workers.hello("w-late", "host-3", 98, ["q"])  # more than 1.5 beats of 60 s ago
    old = CoreClient(qc.redis, worker_name="w-old", _clock=lambda: qc.now() - 600)
    old.workers.hello("w-old", "host-2", 99, ["q"])
    page = body(mc.get(url("workers")))
    row = page.split(url("worker", "w-live"))[1].split("</tr>")[0]
    assert "host-1" in row and "321" in row and "q, q2" in row and ">live<" in row
    assert ">stale<" in page.split(url("worker", "w-late"))[1].split("</tr>")[0]
    dead = page.split(url("worker", "w-old"))[1].split("</tr>")[0]
    assert ">dead<" in dead and "host-2" in dead and "Stop" not in dead
    assert "1 live, 1 stale, 1 dead" in page
    data = mc.get(url("api_workers_info")).json()
    assert {w["name"]: w["state"] for w in data["workers"]} == {
        "w-live": "live", "w-late": "stale", "w-old": "dead"}
    assert data["summary"] == "1 live, 1 stale, 1 dead"
    overview = mc.get(url("api_overview")).json()
    assert overview["worker_summary"] == "1 live, 1 stale, 1 dead"
    detail = body(mc.get(url("worker", "w-live")))
    assert 'class="qless-jid" href="/qless/jobs/j1/"' in detail and "Running since" in detail
    assert "host-1" in detail and url("worker_forget", "w-live") in detail


def test_forget_worker_needs_confirmation_and_manage(mc: Client, qc: Any, viewer: Any,
                                                     as_user: Any) -> None:
    CoreClient(qc.redis, worker_name="w9", _clock=qc.now).workers.hello("w9", "h", 1, ["q"])
    assert "Yes, forget the worker" in body(mc.get(url("worker_forget", "w9")))
    assert as_user(viewer).post(url("worker_forget", "w9")).status_code == 403
    assert [w["name"] for w in qc.workers.info()] == ["w9"]
    assert mc.post(url("worker_forget", "w9")).status_code == 302
    assert qc.workers.info() == []
    csrf = as_user(viewer, csrf=True)
    assert csrf.post(url("worker_forget", "w9")).status_code == 403


def test_forget_queue_only_when_empty(mc: Client, qc: Any) -> None:
    jid = qc.queues["busy"].put("tests.Job", {})
    assert url("queue_forget", "busy") not in body(mc.get(url("queue", "busy")))
    response = mc.post(url("queue_forget", "busy"), follow=True)
    assert "still has jobs" in body(response) and "busy" in qc.queues.names()
    qc.jobs[jid].cancel()
    assert url("queue_forget", "busy") in body(mc.get(url("queue", "busy")))
    assert "Yes, forget the queue" in body(mc.get(url("queue_forget", "busy")))
    assert mc.post(url("queue_forget", "busy")).status_code == 302
    assert "busy" not in qc.queues.names()


def test_search_goes_to_job_tag_or_lists_a_class(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("app.Report", {}, tags=["monthly"])
    qc.queues["q2"].put("app.Report", {})
    qc.queues["q"].put("app.Other", {})
    fail_job(qc, "q3", klass="app.Report")
    assert mc.get(url("search"), {"q": jid})["Location"] == url("job", jid)
    assert mc.get(url("search"), {"q": "monthly"})["Location"] == url("tag", "monthly")
    page = body(mc.get(url("search"), {"q": "app.Report"}))
    assert page.count('<tr data-jid=') == 3 and "app.Other" not in page
    page = body(mc.get(url("search"), {"q": "app.Report", "state": "failed"}))
    assert page.count('<tr data-jid=') == 1
    page = body(mc.get(url("search"), {"q": "app.Report", "queue": "q2"}))
    assert page.count('<tr data-jid=') == 1
    page = body(mc.get(url("search"), {"q": "app.Report", "state": "bogus", "queue": "nope",
                                       "changed": "-1"}))
    assert "Unknown state" in page and "Unknown queue" in page and "Unknown time" in page
    old = CoreClient(qc.redis, _clock=lambda: qc.now() - 7200)
    old.queues["q"].put("app.Report", {})
    assert body(mc.get(url("search"), {"q": "app.Report"})).count("<tr data-jid=") == 4
    page = body(mc.get(url("search"), {"q": "app.Report", "changed": "3600"}))
    assert page.count("<tr data-jid=") == 3
    for probe in ("no-such-thing", "\x00bad", "x" * 300, "é" * 60, "a b", *XSS_PROBES):
        page = body(mc.get(url("search"), {"q": probe}))
        assert "Nothing found" in page or "printable characters" in page
        assert "<script>alert" not in page.split('id="qless"')[1]


def test_klass_scan_is_capped(qc: Any) -> None:
    for i in range(30):
        qc.queues["q"].put("app.Many", {}, jid=f"m{i:02d}")
    jobs, capped = find_by_klass(qc, "app.Many", limit=100, scan=10)
    assert len(jobs) == 10 and capped
    jobs, capped = find_by_klass(qc, "app.Many", limit=5)
    assert len(jobs) == 5 and not capped


def test_charts_page_counts_completions_and_failures(mc: Client, qc: Any) -> None:
    for _ in range(3):
        qc.queues["q"].put("tests.Job", {})
        job = pop_job(qc, "q")
        job.complete()
    fail_job(qc, "q")
    page = body(mc.get(url("charts")))
    assert 'aria-label="Completed per minute, last hour: 3 in total' in page
    assert 'aria-label="Completed per hour, last day: 3 in total' in page
    assert 'aria-label="Failures per day, last 7 days: 1 in total' in page
    assert 'aria-label="Failed per minute, last hour: 1 in total' in page
    assert 'aria-label="Failed per hour, last day: 1 in total' in page
    row = page.split("<th>q</th>")[1].split("</tr>")[0]
    assert row.count("≤") == 6  # p50/p95/p99 of wait and run
    assert "<script" not in page.split('id="qless"')[1]


def test_failures_per_interval_bins_by_failure_time_and_stops_at_the_window(qc: Any) -> None:
    from django_qless.core.client import Client as CoreClient
    from django_qless.core.console import failures_per_interval

    now = qc.now()
    for ago, group in ((30, "a.Error"), (90, "a.Error"), (95, "b.Error"), (4000, "a.Error")):
        at = CoreClient(qc.redis, worker_name="w1", _clock=lambda ago=ago: now - ago)
        at.queues["q"].put("tests.Job", {})
        at.queues["q"].pop().fail(group, "boom")
    counts, capped = failures_per_interval(qc, 60, 60.0, until=now)
    assert sum(counts) == 3 and counts[-1] == 1 and counts[-2] == 2 and not capped
    counts, capped = failures_per_interval(qc, 24, 3600.0, until=now)
    assert counts[-1] == 3 and counts[-2] == 1
    assert failures_per_interval(qc, 60, 60.0, until=now, scan=1)[1]  # stopped early: said so


def test_redis_page(mc: Client, qc: Any) -> None:
    qc.redis.config_set("slowlog-log-slower-than", 0)
    try:
        qc.queues["q"].put("tests.Job", {})
        page = body(mc.get(url("redis")))
    finally:
        qc.redis.config_set("slowlog-log-slower-than", 10000)
        qc.redis.slowlog_reset()
    assert "Redis 7" in page or "Valkey" in page
    assert "Memory used" in page and "Connected clients" in page and "AOF" in page
    assert "<code>put</code>" in page  # the engine call, from the slow log
    policy = qc.redis.config_get("maxmemory-policy")["maxmemory-policy"]
    assert ("qless-policy-warning" in page) == (policy != "noeviction")


@pytest.mark.parametrize("name", ["workers", "search", "charts", "redis"])
def test_layout_nav_footer_and_current_section(mc: Client, name: str) -> None:
    page = body(mc.get(url(name)))
    if name != "search":  # the search box is in every header, not a nav entry
        assert f'href="{url(name)}" class="qless-current" aria-current="page"' in page
    assert page.count('aria-current="page"') == (1 if name == "search" else 2)  # nav, crumb
    assert "All times are in UTC." in page
    assert 'action="/qless/search/"' in page


def test_times_are_utc_whatever_the_time_zone(mc: Client, qc: Any) -> None:
    live = CoreClient(qc.redis, worker_name="w-tz", _clock=qc.now)
    live.workers.hello("w-tz", "h", 1, ["q"])
    qc.queues["q"].put("tests.Job", {}, jid="tz1")
    live.reserve(["q"])
    since = qc.jobs["tz1"].history[-1]["when"]
    expected = dt.datetime.fromtimestamp(since, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    with override_settings(TIME_ZONE="Asia/Kolkata"):  # +05:30: any shift shows
        page = body(mc.get(url("worker", "w-tz")))
    assert f"<td>{expected}</td>" in page


def test_slow_calls_of_a_shard_keyspace_name_the_engine_command(qc: Any) -> None:
    """A shard's engine calls carry its prefix as their one key: the command follows it."""
    from django_qless.core.console import engine_slowlog, primaries

    shard = CoreClient(qc.redis, keyspace="s3", worker_name="w-s3")
    qc.redis.config_set("slowlog-log-slower-than", 0)
    try:
        shard.queues["q"].put("tests.Job", {"n": 1}, jid="in-s3")
        slow = engine_slowlog(shard)
    finally:
        qc.redis.config_set("slowlog-log-slower-than", 10000)
        qc.redis.slowlog_reset()
    put = next(e for e in slow if e["command"] == "put")
    assert "in-s3" in put["args"].split(" ") and "ql:{s3}:" not in put["args"]
    assert [node for node, _ in primaries([qc, shard])] == [primaries([qc])[0][0]]


@pytest.mark.parametrize("name", ["overview", "redis", "workers", "charts", "config",
                                  "throttles", "failed"])
def test_every_page_answers_503_when_redis_is_down(mc: Client, settings: Any,
                                                   name: str) -> None:
    from django_qless.clients import clients

    clients.close_all()
    settings.QLESS = {"default": {"URL": "unix:///nonexistent/redis.sock"}}
    try:
        response = mc.get(url(name))
        assert response.status_code == 503
        assert b"The queue server cannot be reached right now." in response.content
    finally:
        clients.close_all()


# The least-privilege user of docs/guarantees.md ("A dedicated ACL user").
LEAST_PRIVILEGE = ["-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "-@dangerous",
                   "+ping", "+time", "+info", "+select", "+hello"]


def acl_url(qc: Any, redis_url: str, user: str) -> str:
    """Create `user` with the documented least privileges; return its URL for this database."""
    qc.redis.acl_setuser(user, enabled=True, reset=True, passwords=["+pw-" + user],
                         keys=["~ql:*"], channels=["&ql:*"], commands=LEAST_PRIVILEGE)
    assert redis_url.startswith("unix://")
    return redis_url.replace("unix://", f"unix://{user}:pw-{user}@", 1)


def test_redis_page_says_when_the_user_may_not_read_the_slow_log(
        mc: Client, qc: Any, settings: Any, redis_url: str) -> None:
    from django_qless.clients import clients

    limited = acl_url(qc, redis_url, "qless-least")
    clients.close_all()
    settings.QLESS = {"default": {"URL": limited}}
    try:
        page = body(mc.get(url("redis")))
    finally:
        clients.close_all()
        qc.redis.acl_deluser("qless-least")
    assert "No slow engine calls logged." not in page
    assert "refused <code>SLOWLOG</code> to this Redis user" in page
    assert "Memory used" in page


def test_debug_error_page_shows_no_credential(mc: Client, qc: Any, settings: Any,
                                              monkeypatch: Any, redis_url: str) -> None:
    """Django's technical 500 page (DEBUG) masks the password of every Redis URL."""
    import django_qless.views.console as console_views

    secret = "-".join(("s3cret", "pw", "for", "the", "page"))  # (not in the page's source lines)
    settings.DEBUG = True
    settings.QLESS = {"default": {"URL": redis_url}, "reports": {
        "URL": f"redis://qless:{secret}@reports.example:6379/0"}}
    monkeypatch.setenv("QLESS_URL", f"redis://:{secret}@cache.example:6379/0")

    def broken(client: Any, url: str = f"rediss://u:{secret}@x/0") -> Any:
        raise RuntimeError("the page broke")

    monkeypatch.setattr(console_views, "server_report", broken)
    mc.raise_request_exception = False
    response = mc.get(url("redis"), HTTP_AUTHORIZATION=f"Bearer {secret}",
                      **{"QLESS_URL": f"redis://:{secret}@cache.example:6379/0"})
    assert response.status_code == 500
    page = response.content.decode()
    assert "the page broke" in page and "QLESS_URL" in page  # the technical page, shown
    assert secret not in page
    assert "reports.example" in page  # the host stays visible: only credentials go


def test_credential_filter_masks_urls_anywhere() -> None:
    from django_qless.reporting import mask_credentials

    assert mask_credentials("redis://:p/w@h:6379/0 rediss://u:p@x/1 unix:///s.sock "
                            "redis://h/0?password=zz&db=1") == (
        "redis://********************@h:6379/0 rediss://********************@x/1 "
        "unix:///s.sock redis://h/0?password=********************&db=1")


def test_search_pages_past_a_hundred_matches(mc: Client, qc: Any) -> None:
    for i in range(230):
        qc.queues["q"].put("app.jobs.Bulk", {}, jid=f"bulk-{i:03d}")
    page = body(mc.get(url("search"), {"q": "app.jobs.Bulk"}))
    assert page.count("<tr data-jid=") == 100 and "matches 1&ndash;100" in page
    assert 'rel="next"' in page and 'rel="prev"' not in page
    page = body(mc.get(url("search"), {"q": "app.jobs.Bulk", "page": "3"}))
    assert page.count("<tr data-jid=") == 30 and "matches 201&ndash;230" in page
    assert 'rel="next"' not in page and 'rel="prev"' in page
    seen = set()
    for number in (1, 2, 3):
        text = body(mc.get(url("search"), {"q": "app.jobs.Bulk", "page": str(number)}))
        seen |= set(re.findall(r'<tr data-jid="([^"]+)"', text))
    assert len(seen) == 230


def test_search_finds_class_by_substring_and_jid_by_prefix_in_any_case(mc: Client,
                                                                       qc: Any) -> None:
    jid = qc.queues["q"].put("app.reports.Monthly", {})
    qc.queues["q"].put("app.reports.Weekly", {})
    qc.queues["q"].put("app.mail.Send", {})
    page = body(mc.get(url("search"), {"q": "reports"}))
    assert page.count("<tr data-jid=") == 2
    page = body(mc.get(url("search"), {"q": "app.Reports.M"}))  # substring, any case
    assert page.count("<tr data-jid=") == 1 and "app.reports.Monthly" in page
    page = body(mc.get(url("search"), {"q": "REPORTS.MONTHLY"}))
    assert page.count("<tr data-jid=") == 1
    page = body(mc.get(url("search"), {"q": jid[:8]}))  # a partial jid
    assert f'<tr data-jid="{jid}"' in page
    assert mc.get(url("search"), {"q": jid.upper()})["Location"] == url("job", jid)
    page = body(mc.get(url("search"), {"q": jid[:8].upper()}))
    assert f'<tr data-jid="{jid}"' in page


def test_tag_with_a_state_filter_lists_its_jobs_or_says_what_the_filter_left_out(
        mc: Client, qc: Any) -> None:
    waiting = qc.queues["q"].put("app.Job", {}, tags=["nightly"])
    failed = fail_job(qc, "q2", tags=("nightly",))
    page = body(mc.get(url("search"), {"q": "nightly", "state": "failed"}))
    assert f'<tr data-jid="{failed}"' in page and waiting not in page
    page = body(mc.get(url("search"), {"q": "nightly", "state": "running"}))
    assert "has no jobs" not in page and "Nothing found" not in page
    assert "Tag" in page and "has 2 jobs, but none in state running" in page
    assert "the filter left out 1 failed, 1 waiting" in page


def test_job_page_shows_retries_with_their_reasons_and_says_retries_are_remaining(
        mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].put("app.Flaky", {}, retries=3)
    for attempt in (1, 2):
        job = pop_job(qc, "q")
        assert job.jid == jid
        job.retry(0, "app.Flaky.Timeout", f"attempt {attempt} timed out")
    page = body(mc.get(url("job", jid)))
    timeline = page[page.index("<h2>History</h2>"):]
    assert timeline.count("<strong>retry</strong>") == 2
    assert "group=app.Flaky.Timeout" in timeline and "message=attempt 2 timed out" in timeline
    assert "remaining=1" in timeline
    assert "1 of 3 <span class=\"qless-help\">(remaining:" in page
