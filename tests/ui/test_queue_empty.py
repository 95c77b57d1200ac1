"""Emptying or deleting a queue that holds jobs: confirmation counts, batches, progress."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from django_qless.views import queue_empty
from tests.ui.conftest import fail_job, pop_job

URL = "/qless/queues/q/empty/"


def fill(qc: Any) -> dict[str, str]:
    """Put queue q in several states; return a few jids by role."""
    running = qc.queues["q"].put("tests.Job", {}, priority=100)
    pop_job(qc)  # the highest priority: `running` is now running
    failed = fail_job(qc)
    for _ in range(4):
        qc.queues["q"].put("tests.Job", {})
    qc.queues["q"].put("tests.Job", {}, delay=3600)
    qc.queues["q"].recur("tests.Job", {}, 3600, jid="hourly", offset=3600)
    other = qc.queues["other"].put("tests.Job", {})
    return {"running": running, "failed": failed, "other": other}


def test_confirmation_counts_what_goes_and_post_empties(mc: Client, qc: Any) -> None:
    jids = fill(qc)
    page = mc.get(URL).content.decode()
    for state, count in (("waiting", 4), ("scheduled", 1), ("running", 1), ("failed", 1),
                         ("recurring", 1)):
        assert re.search(rf'data-state="{state}">.*?<td>{count}</td>', page), state
    assert "(8 in all)" in page
    response = mc.post(URL, follow=True)
    assert response.redirect_chain[-1][0] == "/qless/queues/q/"
    text = response.content.decode()
    assert ("Emptied queue q: canceled 7 jobs (4 waiting, 1 scheduled, 1 running, 1 failed) "
            "and removed 1 recurring job template.") in text
    assert qc.jobs.get(jids["running"]) is None and qc.jobs.get(jids["failed"]) is None
    assert qc.jobs.recurring("hourly") is None
    assert qc.jobs[jids["other"]].state == "waiting"
    assert qc.queues["q"].contents().total == 0


def test_small_batches_continue_through_the_progress_page(mc: Client, qc: Any,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr(queue_empty, "BATCH", 2)
    monkeypatch.setattr(queue_empty, "REQUEST_SECONDS", 0.0)
    for _ in range(5):
        qc.queues["q"].put("tests.Job", {})
    response = mc.post(URL, {"delete": "1"})
    pages = 0
    while response.status_code == 200:
        pages += 1
        text = response.content.decode()
        assert "Deleting queue" in text and "data-auto-continue" in text
        fields = dict(re.findall(r'name="(shard_at|cursor|totals|delete)" value="([^"]*)"',
                                 text))
        fields = {k: v.replace("&quot;", '"') for k, v in fields.items()}
        response = mc.post(URL, fields)
        assert pages < 10
    assert pages >= 2
    assert response["Location"] == "/qless/"
    assert "q" not in qc.queues.names()
    text = mc.get("/qless/").content.decode()
    assert "Deleted queue q: canceled 5 jobs (5 waiting)." in text


def test_a_job_another_queue_needs_is_kept_and_the_queue_not_deleted(mc: Client, qc: Any
                                                                      ) -> None:
    needed = qc.queues["q"].put("tests.Job", {})
    qc.queues["other"].put("tests.Job", {}, depends=[needed])
    text = mc.post(URL, {"delete": "1"}, follow=True).content.decode()
    assert f"1 job kept in queue q: {needed}: jobs of other queues depend on it" in text
    assert "It was not deleted, since it still has jobs." in text
    assert "q" in qc.queues.names() and qc.jobs[needed].state == "waiting"


def test_refusals_permissions_and_csrf(as_user: Any, viewer: Any, manager: Any, qc: Any
                                       ) -> None:
    qc.queues["q"].put("tests.Job", {})
    assert as_user(viewer).get(URL).status_code == 403
    assert as_user(viewer).post(URL).status_code == 403
    assert as_user(manager, csrf=True).post(URL).status_code == 403
    assert qc.queues["q"].length == 1
    mc = as_user(manager)
    assert mc.get("/qless/queues/nosuch/empty/", follow=True).status_code == 200
    bad = mc.post(URL, {"cursor": "[not json", "totals": "{]"}, follow=True)
    assert bad.status_code == 200 and "not a queue-emptying cursor" in bad.content.decode().lower()
    assert qc.queues["q"].length == 1


@pytest.mark.browser
def test_browser_empty_from_the_queue_page(page: Any, qc: Any,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(queue_empty, "BATCH", 2)
    monkeypatch.setattr(queue_empty, "REQUEST_SECONDS", 0.0)
    for i in range(5):
        qc.queues["q"].put("tests.Job", {"probe": "<img src=x onerror=alert(1)>"},
                           tags=[f"<b>{i}</b>"])
    page.goto(f"{page.base}/qless/queues/q/")
    page.click("text=Empty queue…")
    assert page.inner_text("tr[data-state=waiting] td") == "5"
    page.click("button:text('Yes, empty the queue')")
    page.wait_for_selector("text=Emptied queue q: canceled 5 jobs (5 waiting).", timeout=20000)
    assert page.url.endswith("/qless/queues/q/")
    assert qc.queues["q"].length == 0 and page.dialogs == []
