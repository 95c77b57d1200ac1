"""Pausing live refresh on the Events page closes its stream; resuming replays what was missed."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.ui.test_event_resume import events_of, read_until, url

LIVE_EVENTS = ("() => document.querySelector('[data-live-status]').textContent"
               " === 'live events'")


def test_a_stream_starts_after_the_last_id_given_in_the_query(mc: Client, qc: Any) -> None:
    first = mc.get(url("api_events"))
    chunks = iter(first.streaming_content)  # type: ignore[attr-defined]
    assert next(chunks) == b"retry: 2000\n\n"  # subscribed from here on
    jid = qc.queues["q"].put("tests.Job", {})
    last_id, _ = events_of(read_until(chunks, jid + '"'))[-1]
    first.close()
    missed = qc.queues["q"].put("tests.Job", {})
    second = mc.get(url("api_events") + f"?last={last_id}")
    text = read_until(iter(second.streaming_content), missed + '"')  # type: ignore[attr-defined]
    second.close()
    assert [p["jid"] for _, p in events_of(text)] == [missed]


@pytest.mark.browser
def test_browser_pause_closes_the_stream_and_resume_replays(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/events/")
    page.wait_for_function(LIVE_EVENTS)
    assert page.locator("select[data-live-interval]").count() == 0  # a stream has no interval
    jid = qc.queues["q"].put("tests.Job", {})
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{jid}/']").wait_for()
    page.click("button[data-live-toggle]")
    assert page.inner_text("[data-live-status]") == "live refresh paused"
    missed = qc.queues["q"].put("tests.Job", {})
    page.wait_for_timeout(1500)  # three refresh intervals of the test settings
    assert page.locator(f"a[href='/qless/jobs/{missed}/']").count() == 0
    page.click("button[data-live-toggle]")
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{missed}/']").wait_for()
    page.wait_for_function(LIVE_EVENTS)
    assert page.locator("tr.qless-gap").count() == 0  # replayed: nothing is missing
    page.click("button[data-live-toggle]")
    page.reload()
    page.wait_for_timeout(500)
    assert page.inner_text("[data-live-status]") == "live refresh paused"  # kept on reload
    page.click("button[data-live-toggle]")
    page.wait_for_function(LIVE_EVENTS)
    later = qc.queues["q"].put("tests.Job", {})
    page.locator(f"tr[data-event=put] a[href='/qless/jobs/{later}/']").wait_for()
    assert page.dialogs == []
