"""The operator's console in headless Chromium: workers, search, charts, Redis, layout."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.client import Client as CoreClient
from tests.ui.browser import PROBE, save_screens, wait_live
from tests.ui.conftest import fail_job, pop_job

pytestmark = pytest.mark.browser


def worker(qc: Any, name: str, *, ago: float = 0.0, host: str = "web-1",
           queues: tuple[str, ...] = ("q",)) -> CoreClient:
    """A worker that said hello `ago` seconds ago (and was last seen then)."""
    client = CoreClient(qc.redis, worker_name=name, _clock=lambda: qc.now() - ago)
    client.workers.hello(name, host, 4000 + sum(map(ord, name)) % 997, list(queues))
    return client


def test_workers_liveness_live_refresh_and_forget(page: Any, qc: Any) -> None:
    w1 = worker(qc, "w-busy", queues=("q", "reports"))
    qc.queues["q"].put("tests.Job", {}, jid="running-1")
    w1.reserve(["q"])
    worker(qc, "w-gone", ago=900, host="web-9")
    page.goto(f"{page.base}/qless/workers/")
    busy = page.locator("tr", has=page.locator("a:text('w-busy')"))
    assert "q, reports" in busy.inner_text() and "live" in busy.inner_text()
    gone = page.locator("tr", has=page.locator("a:text('w-gone')"))
    assert "dead" in gone.inner_text() and "qless-stale" in (gone.get_attribute("class") or "")
    wait_live(page)
    odd = "<i>w-new</i>"  # (worker names have no spaces)
    worker(qc, odd)  # a new worker appears by the live refresh, its name shown as text
    page.locator("tbody[data-live-rows=workers] tr", has_text=odd).wait_for()
    assert page.locator("tbody i").count() == 0
    page.click("a:text('w-busy')")
    page.wait_for_url(re.compile(r".*/qless/workers/w-busy$"))
    assert page.locator("a.qless-jid:text('running-1')").count() == 1
    assert "web-1" in page.inner_text("table.qless-summary")
    page.click("text=Forget worker…")
    page.wait_for_selector("text=Forget worker w-busy?")
    page.click("button:text('Yes, forget the worker')")
    page.wait_for_selector("text=Forgot worker w-busy")
    assert "w-busy" not in [w["name"] for w in qc.workers.info()]
    assert page.dialogs == []


def test_forget_empty_queue(page: Any, qc: Any) -> None:
    jid = qc.queues["old"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/old/")
    assert page.locator("text=Forget queue…").count() == 0
    qc.jobs[jid].cancel()
    page.reload()
    page.click("text=Forget queue…")
    page.click("button:text('Yes, forget the queue')")
    page.wait_for_selector("text=Forgot queue old")
    assert "old" not in qc.queues.names()


def test_header_search_finds_job_tag_class_or_nothing(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("app.jobs.Report", {}, tags=["monthly"])
    qc.queues["q"].put("app.jobs.Report", {})
    fail_job(qc, "q2", klass="app.jobs.Report")
    page.goto(f"{page.base}/qless/charts/")
    page.fill("#qless-q", jid)
    page.press("#qless-q", "Enter")
    page.wait_for_url(re.compile(f".*/qless/jobs/{jid}/$"))
    page.fill("#qless-q", "monthly")
    page.press("#qless-q", "Enter")
    page.wait_for_url(re.compile(r".*/qless/tags/monthly$"))
    page.fill("#qless-q", "app.jobs.Report")
    page.press("#qless-q", "Enter")
    page.wait_for_selector("text=Jobs whose class contains")
    assert page.locator("table.qless-jobs tbody tr").count() == 3
    page.select_option("#qless-search-state", "failed")
    page.click("button:text('Search') >> nth=1")
    page.wait_for_url(re.compile(r".*state=failed.*"))
    assert page.locator("table.qless-jobs tbody tr").count() == 1
    page.fill("#qless-q", PROBE)
    page.press("#qless-q", "Enter")
    page.wait_for_selector(".qless-nothing")
    assert PROBE in page.inner_text(".qless-nothing")
    assert page.locator("img[src=x]").count() == 0 and page.dialogs == []


def test_charts_and_redis_pages(page: Any, qc: Any) -> None:
    for _ in range(4):
        qc.queues["q"].put("tests.Job", {})
        pop_job(qc, "q").complete()
    fail_job(qc, "q")
    page.goto(f"{page.base}/qless/charts/")
    assert page.locator("#qless-chart-minute svg rect").count() >= 1
    assert "4 in total" in (page.get_attribute("#qless-chart-minute svg", "aria-label") or "")
    page.click("#qless-chart-failures summary")
    assert page.locator("#qless-chart-failures table tbody tr").count() == 7
    assert page.locator("table.qless-percentiles tbody th:text-is('q')").count() == 1
    assert page.locator("nav.qless-nav a.qless-current").inner_text() == "Charts"
    page.click("nav.qless-nav a:text('Redis')")
    page.wait_for_selector("table.qless-server")
    assert "Memory used" in page.inner_text("table.qless-server")
    assert page.locator("nav.qless-nav a.qless-current").inner_text() == "Redis"
    assert "All times are in UTC." in page.inner_text(".qless-footer")


def test_narrow_screen_tables_scroll_sideways(page: Any, qc: Any) -> None:
    worker(qc, "a-worker-with-a-rather-long-name-" + "x" * 40, host="host-" + "y" * 30)
    qc.queues["q"].put("app.jobs.a_job_class_with_a_long_name", {}, tags=["wide-tag-" * 4])
    page.set_viewport_size({"width": 390, "height": 844})
    for path in ("/qless/", "/qless/queues/q/waiting/", "/qless/workers/", "/qless/charts/",
                 "/qless/redis/", "/qless/search/?q=app.jobs.a_job_class_with_a_long_name"):
        page.goto(page.base + path)
        # The page itself does not scroll sideways; a wide table scrolls in its own box.
        widths = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
        assert widths[0] <= widths[1] + 1, (path, widths)
    page.goto(page.base + "/qless/workers/")
    box = page.evaluate("() => { const s = document.querySelector('.qless-scroll');"
                        " return [s.scrollWidth, s.clientWidth, getComputedStyle(s).overflowX]; }")
    assert box[0] > box[1] and box[2] == "auto"


def test_console_screenshots(page: Any, qc: Any, shots: Path) -> None:
    """Screenshot the console pages light, dark and 390 px wide (for the docs when asked)."""
    busy = worker(qc, "web-1-4242", host="web-1", queues=("emails", "reports"))
    worker(qc, "web-2-4343", ago=600, host="web-2", queues=("reports",))
    for i in range(12):
        qc.queues["emails"].put("app.jobs.send_email", {"to": f"u{i}@example.com"},
                                tags=["emails"])
    jobs, _ = busy.reserve(["emails"])
    for i in range(11):  # the worker's own path: done and failed are counted by the engine
        if i % 5 == 4:
            jobs[0].fail("smtplib.SMTPException", "connection refused")
            jobs, _ = busy.reserve(["emails"])
        else:
            _, jobs, _ = busy.complete_and_reserve(jobs[0], ["emails"], 1)
    pages = (("workers", "/qless/workers/"), ("worker", "/qless/workers/web-1-4242"),
             ("search", "/qless/search/?q=app.jobs.send_email"),
             ("charts", "/qless/charts/"), ("redis", "/qless/redis/"))
    save_screens(page, shots, pages, prefix="console-")


def test_live_times_are_utc_whatever_the_browser_zone(page: Any) -> None:
    context = page.context.browser.new_context(timezone_id="Asia/Kolkata")
    context.add_cookies(page.context.cookies())
    tab = context.new_page()
    tab.goto(page.base + "/qless/")
    wait_live(tab)
    text = tab.inner_text("[data-live-status]")
    assert re.fullmatch(r"live · \d\d:\d\d:\d\d UTC", text), text
    shown = int(text[7:9])
    assert shown in {time.gmtime().tm_hour, (time.gmtime().tm_hour - 1) % 24}
    context.close()


def test_redis_page_says_the_slow_log_is_refused_to_a_least_privilege_user(
        page: Any, qc: Any, redis_url: str) -> None:
    from django.test import override_settings

    from django_qless.clients import clients
    from tests.ui.test_console import acl_url

    limited = acl_url(qc, redis_url, "qless-browser")
    clients.close_all()
    try:
        with override_settings(QLESS={"default": {"URL": limited}}):
            page.goto(f"{page.base}/qless/redis/")
            text = page.inner_text("table.qless-slowlog")
    finally:
        clients.close_all()
        qc.redis.acl_deluser("qless-browser")
    assert "refused SLOWLOG to this Redis user" in text
    assert "No slow engine calls logged." not in text


def test_search_pager_partial_jid_and_tag_filter(page: Any, qc: Any) -> None:
    for i in range(120):
        qc.queues["q"].put("app.jobs.Bulk", {}, jid=f"bulk-{i:03d}")
    tagged = qc.queues["q"].put("app.jobs.Nightly", {}, tags=["nightly"])
    page.goto(f"{page.base}/qless/search/")
    page.fill("#qless-search-page-q", "jobs.bulk")  # a substring, another case
    page.click("button:text('Search') >> nth=1")
    page.wait_for_selector("text=matches 1–100")
    assert page.locator("table.qless-jobs tbody tr").count() == 100
    page.click("a[rel=next]")
    page.wait_for_selector("text=matches 101–120")
    assert page.locator("table.qless-jobs tbody tr").count() == 20
    page.fill("#qless-q", tagged[:6].upper())
    page.press("#qless-q", "Enter")
    page.wait_for_selector(f"tr[data-jid='{tagged}']")
    page.goto(f"{page.base}/qless/search/?q=nightly&state=failed")
    text = page.inner_text(".qless-nothing")
    assert "Tag nightly has 1 job, but none in state failed: the filter left out 1 waiting" \
        in text


def test_job_page_history_shows_retries_and_their_reasons(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("app.Flaky", {}, retries=2)
    pop_job(qc, "q").retry(0, "app.Flaky.Timeout", "the API timed out")
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    entry = page.locator("ol.qless-timeline li", has=page.locator("strong:text-is('retry')"))
    assert "group=app.Flaky.Timeout" in entry.inner_text()
    assert "message=the API timed out" in entry.inner_text()
    assert "remaining" in page.inner_text("table.qless-summary")


def _overflow(page: Any, path: str, width: int) -> list[str]:
    """Return what sticks out past the viewport of `width` px on `path` (empty: nothing)."""
    context = page.context.browser.new_context(viewport={"width": width, "height": 900})
    context.add_cookies(page.context.cookies())
    tab = context.new_page()
    try:
        assert tab.goto(page.base + path).status == 200
        return tab.evaluate("""() => {
            const limit = document.documentElement.clientWidth;
            const out = [];
            if (document.documentElement.scrollWidth > limit) {
                out.push('page ' + document.documentElement.scrollWidth + ' > ' + limit);
            }
            document.querySelectorAll('body *').forEach(el => {
                const box = el.getBoundingClientRect();
                const scroller = el.parentElement && el.parentElement.closest('.qless-scroll');
                if (box.width && box.right > limit + 1 && !scroller) {
                    out.push(el.tagName + '.' + el.className + ' right=' + Math.round(box.right));
                }
            });
            return out.slice(0, 10);
        }""")
    finally:
        context.close()


def test_no_overflow_on_failure_group_recurring_and_failed_pages(page: Any, qc: Any) -> None:
    for _ in range(3):
        fail_job(qc, "a-rather-long-queue-name-for-layout",
                 group="app.errors.AVeryLongExceptionName",
                 message="Traceback (most recent call last):\n" + "x" * 300)
    for i in range(3):
        qc.queues["reports-with-a-long-name"].recur(
            "app.jobs.reports.GenerateTheMonthlyReportForEveryCustomer", {"n": i}, 3600,
            jid=f"monthly-report-{i}", tags=["reports", "monthly", "customers"])
    qc.queues["reports-with-a-long-name"].recur(
        "app." + "VeryLongModuleName" * 8 + ".Job", {"n": 9}, 3600, jid="r" * 48,
        tags=[f"tag-number-{i}" for i in range(10)])
    group = "/qless/failed/group/app.errors.AVeryLongExceptionName"
    assert _overflow(page, group, 390) == []
    assert _overflow(page, "/qless/recurring/", 1400) == []
    assert _overflow(page, "/qless/recurring/", 390) == []
    assert _overflow(page, "/qless/failed/", 1400) == []
    assert _overflow(page, group, 1400) == []


def test_job_page_nav_big_data_and_day_inputs(page: Any, qc: Any) -> None:
    waiting = qc.queues["q"].put("tests.Job", {"blob": "x" * 900_000})
    page.goto(f"{page.base}/qless/jobs/{waiting}/")
    assert page.locator("nav.qless-nav a.qless-current").count() == 0  # not "Overview"
    data = page.locator("details.qless-data-collapsed")
    assert not data.get_attribute("open") and "Show the data (878.9" in data.inner_text()
    assert not page.locator("details.qless-data-collapsed pre").is_visible()
    failed = fail_job(qc, "q2")
    page.goto(f"{page.base}/qless/jobs/{failed}/")
    assert page.inner_text("nav.qless-nav a.qless-current") == "Failed"
    assert page.locator("details.qless-data-collapsed").count() == 0
    page.goto(f"{page.base}/qless/failed/group/boom.Error")
    since = page.locator("input[name=since]")
    assert since.get_attribute("type") == "text"
    assert since.get_attribute("placeholder") == "YYYY-MM-DD"
    page.goto(f"{page.base}/qless/queues/q2/")
    assert page.get_attribute("#qless-day", "type") == "text"


def test_counts_read_in_the_right_number(page: Any, qc: Any) -> None:
    parent = qc.queues["q"].put("tests.Job", {})
    qc.queues["q"].put("tests.Job", {}, depends=[parent])
    page.goto(f"{page.base}/qless/jobs/{parent}/cancel/")
    page.wait_for_selector("button:text('Yes, cancel it and its 1 dependent')")
    fail_job(qc, "q3", group="one.Error")
    page.goto(f"{page.base}/qless/failed/retry/one.Error")
    page.wait_for_selector("button:text-is('Yes, retry 1 job')")
    page.click("button:text-is('Yes, retry 1 job')")
    page.wait_for_selector("text=Retried 1 job of group one.Error.")
