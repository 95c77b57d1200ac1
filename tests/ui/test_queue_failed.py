"""A queue's Failed tab: its failed jobs and their count on every queue page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.ui.browser import wait_live
from tests.ui.conftest import fail_job


def failed_badge(html: str) -> str:
    found = re.search(r'href="/qless/queues/q/failed/">failed <span class="qless-badge"[^>]*>'
                      r'([^<]*)</span>', html)
    assert found, "no Failed tab"
    return found.group(1)


def test_failed_tab_lists_the_queues_failed_jobs(mc: Client, qc: Any) -> None:
    mine = [fail_job(qc, "q", group=g) for g in ("a.Error", "b.Error", "b.Error")]
    theirs = fail_job(qc, "other")
    qc.queues["q"].put("tests.Job", {})
    assert failed_badge(mc.get("/qless/queues/q/").content.decode()) == "3"
    assert failed_badge(mc.get("/qless/queues/q/waiting/").content.decode()) == "3"
    page = mc.get("/qless/queues/q/failed/").content.decode()
    assert failed_badge(page) == "3"
    assert all(f'data-jid="{jid}"' in page for jid in mine)
    assert f'data-jid="{theirs}"' not in page
    assert mc.get("/qless/queues/nosuch/failed/").status_code == 404


@pytest.mark.browser
def test_browser_failed_tab_keeps_its_count_under_live_refresh(page: Any, qc: Any) -> None:
    jid = fail_job(qc, "q")
    qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    wait_live(page)
    tab = page.locator("a.qless-tab", has_text="failed")
    assert tab.inner_text() == "failed 1"
    tab.click()
    page.locator(f"tr[data-jid='{jid}']").wait_for()
