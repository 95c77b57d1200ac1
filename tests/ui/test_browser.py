"""The dashboard in a real headless Chromium against Django's live server."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.client import Client as CoreClient
from tests.ui.browser import PROBE, save_screens, wait_live
from tests.ui.conftest import fail_job, pop_job

pytestmark = pytest.mark.browser


def test_job_appears_live_then_open_and_change_priority(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {"first": True})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    jid = qc.queues["q"].put("tests.Job", {"second": True}, priority=5)
    link = page.locator(f"a[href='/qless/jobs/{jid}/']")
    link.wait_for()  # appeared without a reload
    page.goto(f"{page.base}/qless/")
    wait_live(page)
    row = page.locator("tr", has=page.locator("a[href='/qless/queues/q/']"))
    assert row.locator("td").nth(2).inner_text() == "2"
    qc.queues["q"].put("tests.Job", {})
    page.wait_for_function(
        "() => [...document.querySelectorAll('tr')].some(r => r.textContent.includes('q') "
        "&& r.cells.length > 2 && r.cells[2].textContent === '3')")
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    page.click(f"a[href='/qless/jobs/{jid}/']")
    page.wait_for_url(re.compile(f".*/jobs/{jid}/$"))
    page.click("button[name=priority][value='25']")
    page.wait_for_selector("text=Priority of")
    assert qc.jobs[jid].priority == 25
    page.fill("#qless-priority", "-7")
    page.click("text=Set priority")
    page.wait_for_selector("text=is now -7")
    assert qc.jobs[jid].priority == -7
    # A number field stops a bad value in the browser; make it text to reach the server.
    page.evaluate("document.getElementById('qless-priority').type = 'text'")
    page.fill("#qless-priority", "lots")
    page.click("text=Set priority")
    page.wait_for_selector(".messagelist .error")
    assert qc.jobs[jid].priority == -7
    assert page.dialogs == []


def test_retry_failed_job_and_bulk_retry_group(page: Any, qc: Any) -> None:
    one = fail_job(qc, "q")
    page.goto(f"{page.base}/qless/failed/")
    page.click("a:text('boom.Error')")
    page.click(f"a[href='/qless/jobs/{one}/']")
    page.wait_for_selector("pre.qless-traceback")
    assert "ValueError: boom" in page.inner_text("pre.qless-traceback")
    page.click("button:text('Retry')")
    page.wait_for_selector("text=Requeued job")
    assert qc.jobs[one].state == "waiting"
    pop_job(qc, "q")  # and it can fail again later; now make a group of three
    others = [fail_job(qc, "q2", group="net.Timeout") for _ in range(3)]
    page.goto(f"{page.base}/qless/failed/")
    page.locator("tr", has_text="net.Timeout").locator("a:text('Retry all')").click()
    page.wait_for_selector("text=Retry 3 of the 3 failed jobs")
    page.click("button:text('Yes, retry 3 jobs')")
    page.wait_for_selector("text=Retried 3 jobs of group net.Timeout")
    assert {qc.jobs[j].state for j in others} == {"waiting"}
    assert "net.Timeout" not in qc.jobs.failed()


def test_stored_xss_does_not_run(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put(PROBE, {"html": PROBE}, tags=[PROBE])
    qc.queues["q"].put(PROBE, {"html": PROBE}, tags=[PROBE])
    popper = CoreClient(qc.redis, worker_name="w-xss")
    popper.queues["q"].pop().fail(PROBE, PROBE)
    page.add_init_script("window.__xss = 0; window.alert = () => { window.__xss += 1; };")
    for path in ("/qless/", f"/qless/jobs/{jid}/", "/qless/queues/q/waiting/", "/qless/tags/",
                 "/qless/failed/", "/qless/completed/"):
        page.goto(page.base + path)
        wait_live(page) if page.locator("[data-live-src]").count() else None
        assert page.evaluate("window.__xss") == 0, path
        assert page.locator("img[src=x]").count() == 0, path
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    assert PROBE in page.inner_text("pre.qless-json")
    assert PROBE in page.inner_text(".qless-tags")
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    assert PROBE in page.inner_text("table.qless-jobs")  # re-rendered rows show it as text
    assert page.locator("img[src=x]").count() == 0
    assert page.dialogs == []


def test_events_page_shows_events_live(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/events/")
    page.wait_for_function(
        "() => document.querySelector('[data-live-status]').textContent === 'live events'")
    jid = qc.queues["q"].put(PROBE, {}, tags=[PROBE])
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{jid}/']").wait_for()
    qc.jobs[jid].cancel()
    page.locator("tr[data-event=canceled]").wait_for()
    assert page.locator("img[src=x]").count() == 0
    assert page.dialogs == []


def test_pages_work_without_javascript(browser: Any, live_server: Any, transactional_db: None,
                                       manager: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    context = browser.new_context(java_script_enabled=False)
    tab = context.new_page()
    tab.goto(f"{live_server.url}/admin/login/?next=/qless/jobs/{jid}/")
    tab.fill("#id_username", "manager")
    tab.fill("#id_password", "pw-manager")
    tab.click("input[type=submit]")
    tab.click("button[name=priority][value='-25']")
    tab.wait_for_selector("text=is now -25")
    assert qc.jobs[jid].priority == -25
    tab.click("text=Cancel…")
    tab.click("text=Yes, cancel the job")
    tab.wait_for_selector(f"text=Canceled job {jid}")
    assert qc.jobs.get(jid) is None
    context.close()


def test_screenshots(page: Any, qc: Any, shots: Path) -> None:
    """Screenshot every main page light, dark and 390 px wide (for the docs when asked)."""
    jid = fail_job(qc, "reports", group="reports.TimeoutError",
                   message='Traceback (most recent call last):\n  File "app/jobs.py", line 12, '
                           'in build_report\nTimeoutError: upstream took 30s',
                   worker="web-2-4343", klass="app.jobs.build_report", priority=0,
                   data={"month": "2026-09", "format": "pdf"}, tags=("reports",))
    qc.jobs[jid].track()
    fail_job(qc, "emails", group="smtplib.SMTPException", worker="web-1-4242", priority=0)
    # Jobs put, run and completed over the last hour give the charts some shape.
    now = qc.now()

    def at(when: float) -> CoreClient:
        return CoreClient(qc.redis, worker_name="web-1-4242", _clock=lambda: when)

    for i in range(24):
        start = now - 3000 + i * 120
        wait, run = (i * 7) % 50 + (i % 4) * 70, (i * 3) % 40 + 1
        at(start - wait).queues["emails"].put("app.jobs.send_email", {"to": f"u{i}@example.com"},
                                             tags=["emails", "signup"])
        job = at(start).queues["emails"].pop()
        at(start + run).jobs[job.jid].complete()
    for i in range(5):
        qc.queues["emails"].put("app.jobs.send_email", {"to": f"new{i}@example.com"},
                                tags=["emails"], priority=(i % 3) * 10)
    pop_job(qc, "emails", worker="web-1-4242")
    qc.queues["reports"].put("app.jobs.build_report", {"month": "2026-10"}, delay=3600)
    qc.queues["reports"].recur("app.jobs.nightly", {}, 86400, jid="nightly")
    save_screens(page, shots, (
        ("overview", "/qless/"), ("queue", "/qless/queues/emails/"),
        ("job", f"/qless/jobs/{jid}/"), ("failed", "/qless/failed/"),
        ("failed-group", "/qless/failed/group/reports.TimeoutError"), ("tags", "/qless/tags/"),
        ("tag", "/qless/tags/emails"), ("tracked", "/qless/tracked/"),
        ("recurring", "/qless/recurring/"), ("recurring-job", "/qless/recurring/nightly/"),
        ("completed", "/qless/completed/"),
        ("throttles", "/qless/throttles/"), ("config", "/qless/config/"),
        ("events", "/qless/events/"),
    ))
