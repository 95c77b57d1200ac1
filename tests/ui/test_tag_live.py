"""The tag page refreshes live: its rows and its total."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.ui.browser import wait_live
from tests.ui.conftest import TOKEN


def test_tag_api_gives_rows_and_total(mc: Client, qc: Any, client: Client) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}, tags=["t/<b>"]) for _ in range(3)]
    got = mc.get("/qless/api/tags/t/%3Cb%3E").json()
    assert got["total"] == 3 and sorted(r["jid"] for r in got["jobs"]) == sorted(jids)
    assert client.get("/qless/api/tags/t").status_code == 401
    bearer = client.get("/qless/api/tags/t", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert bearer.status_code == 200 and bearer.json()["total"] == 0
    page = mc.get("/qless/tags/t/%3Cb%3E").content.decode()
    assert 'data-live-src="/qless/api/tags/t/%3Cb%3E"' in page


@pytest.mark.browser
def test_browser_tag_page_refreshes(page: Any, qc: Any) -> None:
    first = qc.queues["q"].put("tests.Job", {}, tags=["live"])
    page.goto(f"{page.base}/qless/tags/live")
    wait_live(page)
    assert page.inner_text("[data-live-text=total]") == "1"
    second = qc.queues["q"].put("tests.Job", {}, tags=["live"])
    page.locator(f"tr[data-jid='{second}']").wait_for()
    page.wait_for_function("() => document.querySelector('[data-live-text=total]')"
                           ".textContent === '2'")
    assert page.locator(f"tr[data-jid='{first}']").count() == 1
