"""Running a recurring job now from its page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client


def test_run_now_puts_one_job_and_keeps_the_schedule(mc: Client, qc: Any) -> None:
    qc.queues["q"].recur("tests.Job", {"n": 1}, 3600, jid="hourly", offset=3600)
    before = qc.jobs.recurring("hourly").next_run
    response = mc.post("/qless/recurring/hourly/run/", follow=True)
    text = response.content.decode()
    assert response.redirect_chain[-1][0] == "/qless/recurring/hourly/"
    assert "of recurring job hourly into queue q now; its schedule is unchanged." in text
    assert qc.queues["q"].length == 1
    assert qc.jobs.recurring("hourly").next_run == before


def test_run_now_refusals(as_user: Any, viewer: Any, manager: Any, qc: Any) -> None:
    qc.queues["q"].recur("tests.Job", {}, 3600, jid="hourly", offset=3600)
    assert as_user(viewer).post("/qless/recurring/hourly/run/").status_code == 403
    assert as_user(manager, csrf=True).post("/qless/recurring/hourly/run/").status_code == 403
    assert as_user(manager).get("/qless/recurring/hourly/run/").status_code == 405
    assert as_user(manager).post("/qless/recurring/nosuch/run/").status_code == 404
    assert qc.queues["q"].length == 0


@pytest.mark.browser
def test_browser_run_now(page: Any, qc: Any) -> None:
    qc.queues["q"].recur("tests.Job", {}, 3600, jid="hourly", offset=3600)
    page.goto(f"{page.base}/qless/recurring/hourly/")
    page.click("button:text('Run now')")
    page.wait_for_selector("text=its schedule is unchanged.")
    assert qc.queues["q"].length == 1
