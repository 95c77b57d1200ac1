"""Live refresh and refusals in a real headless Chromium: consistent pages, small polls."""

from __future__ import annotations

import re
from typing import Any

import pytest

from django_qless.core.client import Client as CoreClient
from django_qless.options import RESULT_KEY
from tests.ui.browser import wait_live
from tests.ui.conftest import pop_job

pytestmark = pytest.mark.browser

# A DOM walk that ignores whitespace: what a server render and a live refresh must share.
STRUCTURE = """(selector) => {
  const out = [];
  const walk = (node, depth) => {
    for (const child of node.childNodes) {
      if (child.nodeType === 3) {
        const text = child.textContent.trim();
        if (text) { out.push([depth, '#text', text]); }
      } else if (child.nodeType === 1) {
        // A CSRF token is masked afresh in every response: compare its presence only.
        const attrs = [...child.attributes].map(a => a.name + '=' + (
          child.name === 'csrfmiddlewaretoken' && a.name === 'value' ? 'token' : a.value)).sort();
        out.push([depth, child.tagName, attrs.join(' ')]);
        walk(child, depth + 1);
      }
    }
  };
  walk(document.querySelector(selector), 0);
  return out;
}"""


def summary_text(page: Any) -> str:
    return str(page.inner_text("table.qless-summary"))


def test_job_page_is_consistent_after_completion_from_outside(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {"n": 1}, priority=5)
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    wait_live(page)
    assert page.locator("text=Set priority").count() == 1
    job = pop_job(qc, "q", worker="w-outside")
    page.wait_for_function("() => document.body.innerText.includes('w-outside')")
    assert "running" in summary_text(page)
    assert page.locator("button:text('Time out')").count() == 1
    job.data[RESULT_KEY] = 42
    job.complete()
    page.wait_for_function(
        "() => document.querySelector('.qless-state').textContent === 'complete'")
    summary = summary_text(page)
    assert re.search(r"Queue\s+—", summary) and re.search(r"Worker\s+—", summary)
    assert "Lock expires" not in summary
    history = page.inner_text(".qless-timeline")
    assert "done" in history and "popped" in history
    assert "Return value" in page.inner_text(".qless-job")
    assert page.locator("button:text('Time out')").count() == 0
    assert page.locator("text=Set priority").count() == 0
    assert page.locator("text=Move to queue").count() == 0
    assert page.locator("button[name=retry]").count() == 0
    assert page.dialogs == []


def test_job_page_follows_a_move_and_a_cancel_from_outside(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    wait_live(page)
    qc.jobs[jid].move("elsewhere")
    page.locator(".qless-summary a[href='/qless/queues/elsewhere/']").wait_for()
    assert page.inner_text(".qless-timeline").count("put") == 2
    qc.jobs[jid].cancel()
    page.wait_for_selector("text=That job does not exist")


def test_job_page_polls_stay_small_for_a_big_job(page: Any, qc: Any) -> None:
    jid = qc.queues["q"].put("tests.Job", {"blob": "x" * 900_000})
    sizes: list[tuple[str, int]] = []

    def on_finished(request: Any) -> None:
        if "/api/" in request.url or f"/jobs/{jid}/" in request.url:
            got = request.sizes()
            sizes.append((request.url, got["responseBodySize"] + got["responseHeadersSize"]))

    page.on("requestfinished", on_finished)
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    page.wait_for_function(
        "() => (document.querySelector('[data-live-status]') || {}).textContent"
        ".startsWith('live \\u00b7')")
    page.wait_for_timeout(1600)  # several polls at the tests' 500 ms interval
    polls = [size for u, size in sizes if u.endswith("/summary/")]
    assert len(polls) >= 3, sizes
    assert max(polls) < 2048, polls
    pages = [size for u, size in sizes if u.endswith(f"/jobs/{jid}/")]
    assert len(pages) == 1 and pages[0] > 900_000  # the page itself, loaded once
    qc.jobs[jid].tag("changed")
    page.locator(".qless-tags a:text('changed')").wait_for()
    pages = [size for u, size in sizes if u.endswith(f"/jobs/{jid}/")]
    assert len(pages) == 2  # one re-read of the page for the change, then small polls again


def test_live_rows_keep_worker_links_like_the_server_render(page: Any, qc: Any) -> None:
    odd = "web/1@host&x+y;z=1"
    for _ in range(3):
        qc.queues["q"].put("tests.Job", {})
    CoreClient(qc.redis, worker_name=odd, _clock=qc.now).queues["q"].pop()
    page.goto(f"{page.base}/qless/queues/q/running/")
    rendered = page.evaluate(STRUCTURE, "tbody[data-live-rows]")
    assert page.locator("tbody a[href*='/qless/workers/']").count() == 1
    CoreClient(qc.redis, worker_name="w-2", _clock=qc.now).queues["q"].pop()
    page.locator("tbody a[href='/qless/workers/w-2']").wait_for()  # a live refresh
    live = page.evaluate(STRUCTURE, "tbody[data-live-rows]")
    page.reload()
    assert live == page.evaluate(STRUCTURE, "tbody[data-live-rows]")
    assert rendered[:len(rendered)] != live  # the refresh did replace the rows
    link = page.locator("tbody a", has_text=odd)
    assert link.get_attribute("href") == "/qless/workers/web/1@host&x+y;z=1"
    link.click()
    page.wait_for_url(re.compile(r".*/qless/workers/web/1@host&x\+y;z=1$"))
    page.goto(f"{page.base}/qless/")
    wait_live(page)
    CoreClient(qc.redis, worker_name="w-3", _clock=qc.now).queues["q"].pop()
    page.locator("a[href='/qless/workers/w-3']").wait_for()
    live = page.evaluate(STRUCTURE, "tbody[data-live-rows=workers]")
    page.reload()
    assert live == page.evaluate(STRUCTURE, "tbody[data-live-rows=workers]")


def test_live_empty_rows_say_what_the_page_says(page: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/queues/q/waiting/")
    wait_live(page)
    pop_job(qc, "q")
    page.locator("tbody tr.qless-empty").wait_for()
    live = page.evaluate(STRUCTURE, "tbody[data-live-rows]")
    page.reload()
    assert live == page.evaluate(STRUCTURE, "tbody[data-live-rows]")


def test_refused_cancel_returns_to_the_confirm_page_which_offers_the_cascade(
        page: Any, qc: Any) -> None:
    first = qc.queues["q"].put("tests.Job", {})
    page.goto(f"{page.base}/qless/jobs/{first}/")
    page.click("text=Cancel…")
    page.wait_for_selector("text=Yes, cancel the job")
    second = qc.queues["q"].put("tests.Job", {}, depends=[first])  # meanwhile, elsewhere
    third = qc.queues["q"].put("tests.Job", {}, depends=[second])
    page.click("text=Yes, cancel the job")
    page.wait_for_url(re.compile(f".*/jobs/{first}/cancel/$"))
    error = page.inner_text(".messagelist .error")
    assert error.startswith("This job can't be canceled on its own: 2 jobs depend on it (")
    assert "Cancel()" not in error and "is a dependency of" not in error
    assert qc.jobs.get(first) is not None
    page.click("text=Yes, cancel it and its 2 dependents")
    page.wait_for_selector(f"text=Canceled job {first} and 2 jobs depending on it.")
    assert page.url.endswith("/qless/queues/q/")
    assert [qc.jobs.get(j) for j in (first, second, third)] == [None, None, None]
    assert page.dialogs == []


def test_bad_config_value_is_refused_on_the_config_page(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/config/")
    page.fill("#id_key", "heartbeat")
    page.fill("#id_value", "banana")
    page.click("button:text-is('Set')")
    page.wait_for_selector(".messagelist .error")
    assert page.url.endswith("/qless/config/")
    assert page.inner_text(".messagelist .error") == (
        "Option heartbeat was not changed: config heartbeat must be an integer, got 'banana'.")
    assert qc.config["heartbeat"] == 60
    page.fill("#id_key", "hartbeat")
    page.fill("#id_value", "30")
    page.click("button:text-is('Set')")
    page.wait_for_selector(".messagelist .warning")
    assert "not an option the engine knows" in page.inner_text(".messagelist .warning")
    assert "not an engine option" in page.inner_text("table.qless-config")


def test_overview_queue_rows_match_the_server_render(page: Any, qc: Any) -> None:
    qc.queues["alpha"].put("tests.Job", {})
    qc.queues["alpha"].pause()
    page.goto(f"{page.base}/qless/")
    wait_live(page)
    qc.queues["beta"].put("tests.Job", {})
    page.locator("tbody[data-live-rows=queues] a[href='/qless/queues/beta/']").wait_for()
    live = page.evaluate(STRUCTURE, "tbody[data-live-rows=queues]")
    page.reload()
    assert live == page.evaluate(STRUCTURE, "tbody[data-live-rows=queues]")
    assert page.locator("tbody[data-live-rows=queues] span.qless-paused").count() == 1


def test_reloaded_job_block_keeps_stored_markup_inert(page: Any, qc: Any) -> None:
    probe = "<img src=x onerror=alert(1)>"
    jid = qc.queues["q"].put(probe, {"html": probe}, tags=[probe])
    page.add_init_script("window.__xss = 0; window.alert = () => { window.__xss += 1; };")
    page.goto(f"{page.base}/qless/jobs/{jid}/")
    wait_live(page)
    count = "(p) => document.querySelector('.qless-job').innerText.split(p).length - 1"
    before = page.evaluate(count, probe)
    qc.jobs[jid].log(probe, {"html": probe})
    page.wait_for_function(f"(p) => ({count})(p) > {before}", arg=probe)
    assert page.locator(".qless-timeline", has_text=probe).count() == 1
    assert page.evaluate("window.__xss") == 0
    assert page.locator("img[src=x]").count() == 0
    assert page.dialogs == []


def test_config_page_shows_each_options_bounds_and_refuses_beyond(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/config/")
    row = page.locator("table.qless-config tr", has=page.locator("code:text-is('heartbeat')"))
    assert "1 to 604,800 s" in row.inner_text()
    page.fill("#id_key", "heartbeat")
    page.fill("#id_value", "99999999999")
    page.click("button:text-is('Set')")
    page.wait_for_selector(".messagelist .error")
    assert "must be an integer from 1 to 604800 (seconds)" in page.inner_text(
        ".messagelist .error")
    assert qc.config["heartbeat"] == 60


def test_throttle_form_says_which_ids_are_allowed(page: Any, qc: Any) -> None:
    page.goto(f"{page.base}/qless/throttles/")
    assert "no spaces, no accented or other non-ASCII letters" in page.inner_text("form.qless-form")
    page.fill("#id_id", "café limit")
    page.fill("#id_maximum", "2")
    page.click("form.qless-form button:text-is('Set')")
    page.wait_for_selector(".messagelist .error")
    assert "'café limit' is not a throttle id" in page.inner_text(".messagelist .error")
    assert "Arg" not in page.inner_text(".messagelist")


def test_config_page_marks_set_options_and_resets_only_them(page: Any, qc: Any) -> None:
    qc.config["grace-period"] = 30
    page.goto(f"{page.base}/qless/config/")
    grace = page.locator("table.qless-config tr", has=page.locator("code:text-is('grace-period')"))
    beat = page.locator("table.qless-config tr", has=page.locator("code:text-is('heartbeat')"))
    assert "set" in grace.locator(".qless-overridden").inner_text()
    assert beat.locator(".qless-default").count() == 1
    assert beat.locator("button:text('Reset to default')").count() == 0
    grace.locator("button:text('Reset to default')").click()
    page.wait_for_selector("text=Reset option grace-period to its default (10).")
    assert qc.config["grace-period"] == 10
