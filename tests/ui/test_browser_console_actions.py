"""The operator's console in Chromium: row and bulk actions, pause from the overview,
the Failed page's stale notice."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest

from tests.ui.browser import wait_live
from tests.ui.conftest import fail_job

pytestmark = pytest.mark.browser


def test_select_all_then_bulk_move_returns_to_the_list(page: Any, qc: Any) -> None:
    jids = [qc.queues["q"].put("tests.Job", {}) for _ in range(3)]
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    page.check("input[data-select-all]")
    assert page.inner_text("[data-selected-count]") == "3"
    page.select_option("select[name=action]", "move")
    page.fill("form.qless-bulk input[name=queue]", "elsewhere")
    page.accept = True
    page.click("form.qless-bulk button[type=submit]")
    page.wait_for_selector("text=Moved 3 jobs to elsewhere.")
    assert page.url.endswith("/qless/queues/q/waiting/")
    assert {qc.jobs[j].queue_name for j in jids} == {"elsewhere"}


def test_selection_survives_a_live_refresh(page: Any, qc: Any) -> None:
    first = qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    page.check(f"input[name=jid][value='{first}']")
    page.locator("body").click(position={"x": 5, "y": 5})  # focus leaves the rows
    second = qc.queues["q"].put("tests.Job", {})
    page.locator(f"input[name=jid][value='{second}']").wait_for()  # rows were rebuilt
    assert page.is_checked(f"input[name=jid][value='{first}']")
    assert not page.is_checked(f"input[name=jid][value='{second}']")
    page.select_option("select[name=action]", "priority")
    page.fill("form.qless-bulk input[name=priority]", "12")
    page.accept = True
    page.click("form.qless-bulk button[type=submit]")
    page.wait_for_selector("text=Reprioritized 1 job to priority 12.")
    assert qc.jobs[first].priority == 12 and qc.jobs[second].priority == 0


def test_row_actions_on_a_live_row_retry_and_refuse(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/tracked/")
    wait_live(page)
    jid = fail_job(qc)
    qc.jobs[jid].track()
    row = page.locator(f"tr[data-jid='{jid}']")
    row.wait_for()  # built by the live refresh from the <template>
    row.locator("summary").click()
    assert row.locator("button:text('Set priority')").count() == 0  # failed: no priority
    assert row.locator("button:text('Untrack')").count() == 1
    row.locator("button:text('Retry')").click()
    page.wait_for_selector(f"text=Requeued job {jid} into q.")
    assert page.url.endswith("/qless/tracked/")
    assert qc.jobs[jid].state == "waiting"
    row = page.locator(f"tr[data-jid='{jid}']")
    row.locator("summary").click()
    row.locator("input[name=queue]").fill("bad name!")
    row.locator("button:text('Move')").click()
    page.wait_for_selector("text=Queue names are 1-64 characters")
    assert page.url.endswith("/qless/tracked/") and qc.jobs[jid].queue_name == "q"


def test_row_cancel_asks_first(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    row = page.locator(f"tr[data-jid='{jid}']")
    row.locator("summary").click()
    row.locator("button:text('Cancel')").click()  # the fixture dismisses the confirm
    assert page.dialogs == ["Cancel this job? It is deleted with its history."]
    assert qc.jobs.get(jid) is not None
    page.accept = True
    row.locator("button:text('Cancel')").click()
    page.wait_for_selector(f"text=Canceled job {jid}.")
    assert page.url.endswith("/qless/queues/q/waiting/") and qc.jobs.get(jid) is None


def test_pause_and_unpause_from_the_overview(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/")
    wait_live(page)
    row = page.locator("table.qless-queues tbody tr", has=page.locator("a:text('q')"))
    page.accept = True
    row.locator("button:text('Pause')").click()
    page.wait_for_selector("text=Paused queue q.")
    assert page.url.endswith("/qless/") and qc.queues["q"].paused
    qc.queues["q"].put("tests.Job", {})  # the live refresh rebuilds the row
    row = page.locator("table.qless-queues tbody tr", has=page.locator("a:text('q')"))
    page.wait_for_function("() => [...document.querySelectorAll('table.qless-queues td')]"
                           ".some(td => td.textContent === '2')")
    row.locator("button:text('Unpause')").click()
    page.wait_for_selector("text=Unpaused queue q.")
    assert not qc.queues["q"].paused


def test_failed_page_says_new_failures_instead_of_a_lying_badge(page: Any, qc: Any) -> None:
    for _ in range(5):
        fail_job(qc)
    page.goto(f"{page.base}/qless/failed/")
    wait_live(page)
    stale = page.locator("[data-live-stale]")
    assert stale.is_hidden()
    fail_job(qc)
    fail_job(qc)
    stale.wait_for(state="visible")
    assert "now 7" in stale.inner_text()
    assert page.inner_text("table.qless-failed tbody tr td:nth-child(2)") == "5"
    assert "<strong>5</strong>" in page.inner_html(".qless-failed-total")
    page.click("[data-live-stale] a:text('reload')")
    page.wait_for_selector("[data-live-stale][hidden]", state="attached")
    assert page.inner_text("table.qless-failed tbody tr td:nth-child(2)") == "7"
    assert re.search(r"7 failed jobs? in 1 group", page.inner_text(".qless-failed-total"))


def test_events_page_shows_all_100_events_across_reconnects(page: Any, qc: Any) -> None:
    # QLESS_UI["EVENTS_STREAM_SECONDS"] is 3 in the tests: each response ends after 3 s and
    # the browser reconnects 2 s later, so the puts below span at least one reconnect.
    page.goto(f"{page.base}/qless/events/")
    page.wait_for_function(
        "() => document.querySelector('[data-live-status]').textContent === 'live events'")
    page.evaluate("""() => { window.qlessReconnects = 0;
      const status = document.querySelector('[data-live-status]');
      new MutationObserver(() => { if (status.textContent === 'reconnecting') {
        window.qlessReconnects += 1; } }).observe(status, {childList: true,
        characterData: true, subtree: true}); }""")
    jids = []
    for n in range(100):
        jids.append(qc.queues["q"].put("tests.Job", {"n": n}))
        time.sleep(0.08)  # 8 s of puts
    page.wait_for_function(
        "n => document.querySelectorAll('tr[data-event=put]').length >= n", arg=100)
    time.sleep(0.5)  # anything extra (a duplicate) would have arrived by now
    shown = page.evaluate("""() => [...document.querySelectorAll('tr[data-event=put]')]
      .map(r => r.cells[2].textContent).reverse()""")
    assert shown == jids  # all 100, in order, no duplicates
    assert page.evaluate("() => window.qlessReconnects") >= 1
    assert page.locator("tr.qless-gap").count() == 0


def test_events_page_marks_a_gap_it_cannot_replay(page: Any, qc: Any) -> None:
    from django_qless.views import event_buffer

    page.goto(f"{page.base}/qless/events/")
    page.wait_for_function(
        "() => document.querySelector('[data-live-status]').textContent === 'live events'")
    jid = qc.queues["q"].put("tests.Job", {})
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{jid}/']").wait_for()
    # As if the reconnect reached another web process: the browser's last id is unknown there.
    assert event_buffer._current is not None
    event_buffer._current.token = "0badc0de"
    gap = page.locator("tr.qless-gap")
    gap.wait_for(timeout=20000)
    assert re.fullmatch(r"Reconnected — events between .+ and .+ may be missing\.",
                        gap.inner_text().strip())
    later = qc.queues["q"].put("tests.Job", {})
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{later}/']").wait_for()
    assert page.locator("tr.qless-gap").count() == 1
