"""Acting on every job a listing matches, not only one page: count, batches, progress."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from django_qless.views import bulk_all
from tests.ui.conftest import fail_job

URL = "/qless/bulk/all/"


def follow_progress(mc: Client, response: Any) -> tuple[Any, int]:
    """Post each progress page's form back until the work is done; return the redirect."""
    pages = 0
    while response.status_code == 200 and "data-auto-continue" in response.content.decode():
        pages += 1
        fields = dict(re.findall(r'<input type="hidden" name="([a-z_]+)" value="([^"]*)"',
                                 response.content.decode()))
        response = mc.post(URL, {k: unescape(v) for k, v in fields.items()})
        assert pages < 50
    return response, pages


@pytest.fixture
def small_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk_all, "BATCH", 7)
    monkeypatch.setattr(bulk_all, "REQUEST_SECONDS", 0.0)


def test_cancel_all_waiting_jobs_of_a_queue_across_pages(mc: Client, qc: Any,
                                                         small_batches: None) -> None:
    for _ in range(30):
        qc.queues["q"].put("tests.Job", {})
    qc.queues["other"].put("tests.Job", {})
    tab = mc.get("/qless/queues/q/waiting/").content.decode()
    assert "Act on all 30 waiting jobs…" in tab
    confirm = mc.get(URL, {"queue": "q", "state": "waiting"}).content.decode()
    assert "30 jobs match." in confirm
    response, pages = follow_progress(
        mc, mc.post(URL, {"queue": "q", "state": "waiting", "action": "cancel"}))
    assert pages >= 4
    assert response["Location"] == "/qless/queues/q/waiting/"
    assert qc.queues["q"].length == 0 and qc.queues["other"].length == 1
    assert "Canceled 30 jobs." in mc.get(response["Location"]).content.decode()


def test_priority_for_all_and_refusals_are_named(mc: Client, qc: Any, small_batches: None
                                                 ) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}) for _ in range(10)]
    response, _ = follow_progress(mc, mc.post(URL, {"queue": "q", "state": "waiting",
                                                    "action": "priority", "priority": "9"}))
    assert {qc.jobs[j].priority for j in jids} == {9}
    assert "Reprioritized 10 jobs to priority 9." in mc.get(response["Location"]).content.decode()
    bad = mc.post(URL, {"queue": "q", "state": "waiting", "action": "move", "target": "a b"},
                  follow=True).content.decode()
    assert "Nothing was changed: Queue names are 1-64 characters" in bad
    response, _ = follow_progress(mc, mc.post(URL, {"queue": "q", "state": "waiting",
                                                    "action": "move", "target": "r"}))
    assert qc.queues["r"].length == 10 and qc.queues["q"].length == 0
    assert "Moved 10 jobs to r." in mc.get(response["Location"]).content.decode()


def test_retry_all_of_a_filtered_failure_group(mc: Client, qc: Any, small_batches: None
                                               ) -> None:
    mine = [fail_job(qc, "q") for _ in range(9)]
    theirs = [fail_job(qc, "other") for _ in range(4)]
    page = mc.get("/qless/failed/group/boom.Error?queue=q").content.decode()
    assert "Act on all matching…" in page
    confirm = mc.get(URL, {"group": "boom.Error", "queue": "q"}).content.decode()
    assert "9 jobs match." in confirm
    response, _ = follow_progress(mc, mc.post(URL, {"group": "boom.Error", "queue": "q",
                                                    "action": "retry"}))
    assert response["Location"] == "/qless/failed/group/boom.Error?queue=q"
    assert {qc.jobs[j].state for j in mine} == {"waiting"}
    assert {qc.jobs[j].state for j in theirs} == {"failed"}
    assert "Retried 9 jobs." in mc.get(response["Location"]).content.decode()


def test_access_csrf_and_bad_selections(as_user: Any, viewer: Any, manager: Any, qc: Any
                                        ) -> None:
    qc.queues["q"].put("tests.Job", {})
    query = {"queue": "q", "state": "waiting"}
    assert as_user(viewer).get(URL, query).status_code == 403
    assert as_user(viewer).post(URL, {**query, "action": "cancel"}).status_code == 403
    assert as_user(manager, csrf=True).post(URL, {**query, "action": "cancel"}
                                            ).status_code == 403
    mc = as_user(manager)
    for bad in ({"queue": "q", "state": "failed"}, {"queue": "<b>x</b>", "state": "waiting"},
                {"group": "g", "since": "2020-13-40"}, {}):
        response = mc.get(URL, bad, follow=True)
        assert response.status_code == 200 and "Nothing was changed" in response.content.decode()
        assert "<b>x</b>" not in response.content.decode()
    assert qc.queues["q"].length == 1


@pytest.mark.browser
def test_browser_cancel_all_matching_with_progress(page: Any, qc: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bulk_all, "BATCH", 10)
    monkeypatch.setattr(bulk_all, "REQUEST_SECONDS", 0.0)
    for _ in range(40):
        qc.queues["q"].put("tests.Job", {"probe": "<img src=x onerror=alert(1)>"})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    page.click("text=Act on all 40 waiting jobs…")
    assert page.inner_text("[data-matching-count]") == "40 jobs match."
    page.select_option("#qless-all-action", "cancel")
    page.click("button:text('Yes, act on all matching jobs')")
    page.wait_for_selector("text=Canceled 40 jobs.", timeout=30000)
    assert page.url.endswith("/qless/queues/q/waiting/")
    assert qc.queues["q"].length == 0 and page.dialogs == []
