"""Pausing live refresh and choosing its interval, kept across pages in localStorage."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.ui.browser import wait_live

pytestmark = pytest.mark.browser


def test_pause_survives_a_reload_and_resume_refreshes(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    page.click("button[data-live-toggle]")
    assert page.inner_text("button[data-live-toggle]") == "Resume live"
    assert page.inner_text("[data-live-status]") == "live refresh paused"
    later = qc.queues["q"].put("tests.Job", {})
    page.reload()
    time.sleep(1.5)  # three refresh intervals of the test settings
    assert page.locator(f"tr[data-jid='{later}']").count() == 1  # (the reload showed it)
    newest = qc.queues["q"].put("tests.Job", {})
    time.sleep(1.5)
    assert page.locator(f"tr[data-jid='{newest}']").count() == 0  # paused: not refreshed
    assert page.get_attribute("button[data-live-toggle]", "aria-pressed") == "true"
    page.click("button[data-live-toggle]")
    page.locator(f"tr[data-jid='{newest}']").wait_for()
    wait_live(page)


def test_interval_choice_is_kept(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    page.select_option("select[data-live-interval]", "10000")
    assert page.evaluate("localStorage.getItem('qless.liveInterval')") == "10000"
    page.goto(f"{page.base}/qless/workers/")
    assert page.eval_on_selector("select[data-live-interval]", "s => s.value") == "10000"
    page.select_option("select[data-live-interval]", "1000")
    wait_live(page)
