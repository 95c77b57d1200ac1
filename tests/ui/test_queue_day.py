"""A queue's statistics pager never leads into a day that has not begun."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.test import Client


def _today(qc: Any) -> dt.date:
    return dt.datetime.fromtimestamp(float(qc.now()), tz=dt.UTC).date()


def test_today_has_no_next_day_link_and_yesterday_links_today(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    today = _today(qc)
    tomorrow, yesterday = today + dt.timedelta(days=1), today - dt.timedelta(days=1)
    page = mc.get("/qless/queues/q/").content.decode()
    assert f"?date={tomorrow:%Y-%m-%d}" not in page
    assert f"?date={yesterday:%Y-%m-%d}" in page
    earlier = mc.get(f"/qless/queues/q/?date={yesterday:%Y-%m-%d}").content.decode()
    assert f"?date={today:%Y-%m-%d}" in earlier
    future = mc.get(f"/qless/queues/q/?date={tomorrow:%Y-%m-%d}", follow=True)
    text = future.content.decode()
    assert future.status_code == 200
    assert f"{tomorrow:%Y-%m-%d} has not begun yet (UTC): showing today." in text
    assert f"Statistics for {today:%Y-%m-%d} (UTC)" in text


@pytest.mark.browser
def test_browser_day_pager_stops_at_today(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    today = _today(qc)
    page.goto(f"{page.base}/qless/queues/q/")
    page.click(f"a:text('{today - dt.timedelta(days=1):%Y-%m-%d}')")
    page.click(f"a:text('{today:%Y-%m-%d}')")
    page.wait_for_selector(f"h2:text('Statistics for {today:%Y-%m-%d} (UTC)')")
    assert page.locator(f"a:text('{today + dt.timedelta(days=1):%Y-%m-%d}')").count() == 0
