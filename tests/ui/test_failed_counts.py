"""Failed counts per queue: a column on the overview and the queue's Failed tab, both live."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from django_qless.views import data
from tests.ui.browser import wait_live
from tests.ui.conftest import fail_job


def test_overview_counts_each_queues_failed_jobs(mc: Client, qc: Any) -> None:
    qc.queues["calm"].put("tests.Job", {})
    fail_job(qc, "q", group="a.Error")
    fail_job(qc, "q", group="b.Error")
    fail_job(qc, "other", group="a.Error")
    rows = {q["name"]: q for q in mc.get("/qless/api/overview/").json()["queues"]}
    assert (rows["q"]["failed"], rows["other"]["failed"], rows["calm"]["failed"]) == (2, 1, 0)
    page = mc.get("/qless/").content.decode()
    assert "<th>Failed</th>" in page
    assert '<td><a href="/qless/queues/q/failed/">2</a></td>' in page
    assert '<td><a href="/qless/queues/calm/failed/">0</a></td>' in page
    assert mc.get("/qless/api/queues/q/").json()["failed"] == 2


def test_a_stopped_reading_says_the_counts_are_lower_bounds(qc: Any) -> None:
    for _ in range(3):
        fail_job(qc, "q")
    assert data.failed_by_queue([qc], scan=2) == ({"q": 2}, True)
    assert data.failed_by_queue([qc]) == ({"q": 3}, False)


@pytest.mark.browser
def test_browser_failed_counts_refresh_live(page: Any, qc: Any) -> None:
    fail_job(qc, "q")
    page.goto(f"{page.base}/qless/")
    wait_live(page)
    cell = "table.qless-queues a[href='/qless/queues/q/failed/']"
    assert page.inner_text(cell) == "1"
    fail_job(qc, "q")
    page.wait_for_function(f"() => document.querySelector(\"{cell}\").textContent === '2'")
    page.goto(f"{page.base}/qless/queues/q/")
    wait_live(page)
    badge = "a.qless-tab[href='/qless/queues/q/failed/'] .qless-badge"
    assert page.inner_text(badge) == "2"
    fail_job(qc, "q")
    page.wait_for_function(f"() => document.querySelector(\"{badge}\").textContent === '3'")


def test_the_failed_tab_counts_as_its_live_refresh_does(mc: Client, qc: Any,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from django_qless.views import queue_failed

    monkeypatch.setattr(queue_failed, "TAB_SCAN", 2)
    jids = [fail_job(qc, "q") for _ in range(3)]
    page = mc.get("/qless/queues/q/failed/").content.decode()
    assert 'data-live-text="failed">2+</span>' in page
    assert mc.get("/qless/api/queues/q/").json()["failed"] == "2+"
    assert all(f'data-jid="{jid}"' in page for jid in jids)  # the listing reads further
