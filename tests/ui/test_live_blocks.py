"""The recurring, throttles and config pages refresh live: a version polled as JSON, the block
re-read from the page when it changes."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.test import Client

from tests.ui.browser import wait_live
from tests.ui.conftest import TOKEN

LIVE_PAGES = (("/qless/recurring/", "/qless/api/recurring/", "recurring"),
              ("/qless/throttles/", "/qless/api/throttles/", "rows"),
              ("/qless/config/", "/qless/api/config/", "rows"))


def _version(html: str) -> str:
    found = re.search(r'data-live-version="([0-9a-f]+)"', html)
    assert found is not None
    return found.group(1)


@pytest.mark.parametrize(("page", "api", "key"), LIVE_PAGES)
def test_page_version_is_the_api_version_until_something_changes(
        mc: Client, qc: Any, client: Client, page: str, api: str, key: str) -> None:
    qc.queues["q"].recur("tests.Job", {}, 3600, offset=3600)
    qc.throttles["th"].set(2)
    html = mc.get(page).content.decode()
    assert f'data-live-src="{api}"' in html
    got = mc.get(api).json()
    assert got["version"] == _version(html) and got[key]
    qc.queues["q"].recur("tests.Job", {}, 60, offset=3600)
    qc.throttles["other"].set(5)
    qc.config["grace-period"] = 20
    assert mc.get(api).json()["version"] != got["version"]
    assert client.get(api).status_code == 401
    assert client.get(api, HTTP_AUTHORIZATION=f"Bearer {TOKEN}").status_code == 200


def test_recurring_page_keeps_its_page_in_the_poll(mc: Client, qc: Any) -> None:
    for _ in range(30):
        qc.queues["q"].recur("tests.Job", {}, 3600, offset=3600)
    html = mc.get("/qless/recurring/?page=2").content.decode()
    assert 'data-live-src="/qless/api/recurring/?page=2"' in html
    second = mc.get("/qless/api/recurring/?page=2").json()
    assert len(second["recurring"]) == 5 and second["version"] == _version(html)


def test_a_past_next_run_says_it_is_due(mc: Client, qc: Any) -> None:
    due = qc.queues["q"].recur("tests.Job", {}, 3600)  # first run: now
    later = qc.queues["q"].recur("tests.Job", {}, 3600, offset=3600)
    rows = {r["jid"]: r for r in mc.get("/qless/api/recurring/").json()["recurring"]}
    assert rows[due]["due"] is True and rows[later]["due"] is False
    listing = mc.get("/qless/recurring/").content.decode()
    assert listing.count('class="qless-due"') == 1
    assert 'class="qless-due"' in mc.get("/qless/queues/q/recurring/").content.decode()
    detail = mc.get(f"/qless/recurring/{due}/").content.decode()
    assert "due: the next job is put when a worker next takes jobs from q" in detail
    assert "qless-due" not in mc.get(f"/qless/recurring/{later}/").content.decode()


@pytest.mark.browser
def test_browser_recurring_throttles_and_config_refresh(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/recurring/")
    wait_live(page)
    assert "No recurring jobs." in page.inner_text("#qless-recurring-live")
    jid = qc.queues["q"].recur("tests.Job", {}, 3600, offset=3600)
    page.locator(f"#qless-recurring-live a[href='/qless/recurring/{jid}/']").wait_for()
    assert page.inner_text("#qless-recurring-live h2") == "1 recurring job"

    page.goto(f"{page.base}/qless/throttles/")
    wait_live(page)
    qc.throttles["live-th"].set(7)
    page.locator("#qless-throttles-live tr[data-throttle='live-th']").wait_for()
    assert "7" in page.inner_text("tr[data-throttle='live-th']")

    page.goto(f"{page.base}/qless/config/")
    wait_live(page)
    page.fill("#id_key", "grace")  # typing in the form below the table is never disturbed
    qc.config["grace-period"] = 30
    page.wait_for_function("() => /grace-period\\s+30\\s+set/.test("
                           "document.querySelector('#qless-config-live').innerText)")
    assert page.input_value("#id_key") == "grace"
    assert page.dialogs == []


@pytest.mark.browser
def test_browser_paused_config_page_stays_as_it_was(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/config/")
    wait_live(page)
    page.click("button[data-live-toggle]")
    qc.config["grace-period"] = 30
    page.wait_for_timeout(1500)  # three refresh intervals of the test settings
    assert "Reset to default" not in page.inner_text("#qless-config-live")
    page.click("button[data-live-toggle]")
    page.wait_for_function("() => document.querySelector('#qless-config-live')"
                           ".innerText.includes('Reset to default')")


@pytest.mark.parametrize("query", ["page=abc", "page=-1", "page=99999999999", "shard=nosuch",
                                   "page=%00", "id=%3Cscript%3E"])
@pytest.mark.parametrize(("page", "api", "key"), LIVE_PAGES)
def test_bad_queries_never_answer_500(mc: Client, qc: Any, page: str, api: str, key: str,
                                      query: str) -> None:
    qc.queues["q"].recur("tests.Job", {}, 3600)
    for path in (f"{page}?{query}", f"{api}?{query}"):
        assert mc.get(path).status_code in (200, 302, 400, 404), path


def test_recurring_job_api_gives_its_row_data_and_page_version(mc: Client, qc: Any) -> None:
    jid = qc.queues["q"].recur("tests.Job", {"n": 1}, 3600, offset=3600)
    html = mc.get(f"/qless/recurring/{jid}/").content.decode()
    assert f'data-live-src="/qless/api/recurring/{jid}/"' in html
    got = mc.get(f"/qless/api/recurring/{jid}/").json()
    assert got["version"] == _version(html) and got["job"]["interval"] == 3600
    assert mc.get("/qless/api/recurring/nosuch/").status_code == 404


@pytest.mark.browser
def test_browser_recurring_job_page_follows_changes_and_its_end(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].recur("tests.Job", {}, 3600, offset=3600)
    page.goto(f"{page.base}/qless/recurring/{jid}/")
    wait_live(page)
    page.fill("#id_priority", "5")  # the edit form is outside the refreshed block
    qc.jobs.recurring(jid).update(interval=300)
    page.wait_for_function("() => /Every\\s+5m/.test("
                           "document.querySelector('#qless-recurring-job-live').innerText)")
    assert page.input_value("#id_priority") == "5"
    qc.jobs.recurring(jid).cancel()
    page.wait_for_selector("text=There is no recurring job")


def test_tags_api_counts_and_versions_the_tags_page(mc: Client, qc: Any) -> None:
    for _ in range(2):
        qc.queues["q"].put("tests.Job", {}, tags=["pair"])
    html = mc.get("/qless/tags/").content.decode()
    got = mc.get("/qless/api/tags/").json()
    assert got["tags"] == ["pair"] and got["counts"] == {"pair": 2}
    assert 'data-live-src="/qless/api/tags/"' in html and got["version"] == _version(html)


@pytest.mark.browser
def test_browser_tags_page_refreshes(page: Any, qc: Any) -> None:
    for _ in range(2):
        qc.queues["q"].put("tests.Job", {}, tags=["pair"])
    page.goto(f"{page.base}/qless/tags/")
    wait_live(page)
    assert page.inner_text("#qless-tags-live [data-tag-count]") == "2"
    qc.queues["q"].put("tests.Job", {}, tags=["pair"])
    page.wait_for_function("() => document.querySelector('#qless-tags-live [data-tag-count]')"
                           ".textContent === '3'")
