"""The Failed group page's filter form in a real headless Chromium."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.ui.test_failed_filter import NOV1, NOV3, fail_at

pytestmark = pytest.mark.browser


def rows(tab: Any) -> list[str]:
    return tab.locator("table.qless-jobs tbody tr[data-jid]").evaluate_all(
        "rows => rows.map(r => r.dataset.jid)")


def test_filter_form_narrows_the_group_and_clear_resets_it(page: Any, qc: Any) -> None:
    a1, b1 = fail_at(qc, "a", NOV1), fail_at(qc, "b", NOV1)
    a3, b3 = fail_at(qc, "a", NOV3), fail_at(qc, "b", NOV3)
    page.goto(f"{page.base}/qless/failed/group/boom.Error")
    assert rows(page) == [b3, a3, b1, a1]
    page.fill("input[name=queue]", "a")
    page.fill("input[name=since]", "2026-11-02")
    page.click("form.qless-failed-filter input[type=submit]")
    page.wait_for_url(re.compile(r".*queue=a.*since=2026-11-02.*"))
    assert rows(page) == [a3]
    page.click("form.qless-failed-filter a:text('clear')")
    page.wait_for_url(re.compile(r".*/failed/group/boom\.Error$"))
    assert rows(page) == [b3, a3, b1, a1]
    page.fill("input[name=queue]", "not a queue!")
    page.click("form.qless-failed-filter input[type=submit]")
    page.get_by_text(re.compile(r"^Filter not applied: .*Queue names are 1-64")).wait_for()
    assert rows(page) == [b3, a3, b1, a1] and not page.dialogs


def test_live_refresh_keeps_heading_rows_and_newest_failure_consistent(page: Any,
                                                                      qc: Any) -> None:
    from tests.ui.browser import wait_live
    from tests.ui.conftest import fail_job

    jids = [fail_job(qc) for _ in range(8)]
    page.goto(f"{page.base}/qless/failed/group/boom.Error")
    wait_live(page)
    stale = page.locator("[data-live-stale=snapshot]")
    assert not stale.is_visible()
    heading = page.inner_text("section h2")
    newest = page.inner_text("details.qless-sample summary")
    newer = [fail_job(qc) for _ in range(2)]
    stale.wait_for(state="visible")
    assert f"now 10 failed jobs, the newest {newer[-1]}" in stale.inner_text()
    # The snapshot the page was loaded with stays whole: 8 in the heading, 8 rows, same newest.
    assert page.inner_text("section h2") == heading and heading.startswith("8 failed jobs")
    assert sorted(rows(page)) == sorted(jids)
    assert page.inner_text("details.qless-sample summary") == newest
    page.click("[data-live-stale=snapshot] a:text('reload')")
    page.wait_for_function("() => document.querySelector('section h2').textContent"
                           ".startsWith('10 failed jobs')")
    assert len(rows(page)) == 10 and newer[-1] in page.inner_text("details.qless-sample summary")
