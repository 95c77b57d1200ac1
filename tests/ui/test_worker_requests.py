"""Quiet and Stop from the console: confirmation, POST with CSRF, the manage permission, the
request stored for the worker, a plain message for unknown and dead workers."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from django_qless.core.client import Client as CoreClient
from tests.ui.browser import wait_live


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def hello(qc: Any, name: str, ago: float = 0.0) -> None:
    client = CoreClient(qc.redis, worker_name=name, _clock=lambda: qc.now() - ago)
    client.workers.hello(name, "web-1", 42, ["q"])


def test_quiet_asks_for_confirmation_then_stores_the_request(mc: Client, qc: Any) -> None:
    hello(qc, "w1")
    page = mc.get(url("worker_quiet", "w1")).content.decode()
    assert "Quiet worker w1?" in page and "Yes, make it quiet" in page
    assert qc.workers.info("w1")[0]["request"] == ""
    response = mc.post(url("worker_quiet", "w1"), {"next": url("workers")})
    assert response.status_code == 302 and response["Location"] == url("workers")
    assert texts(response) == ["Asked worker w1 to be quiet: it finishes its running jobs, "
                               "takes no new ones and exits."]
    assert qc.workers.info("w1")[0]["request"] == "quiet"
    detail = mc.get(url("worker", "w1")).content.decode()
    assert "Asked from the console to be quiet" in detail
    assert "quiet asked" in mc.get(url("workers")).content.decode()


def test_stop_goes_back_to_the_worker_page(mc: Client, qc: Any) -> None:
    hello(qc, "w1")
    response = mc.post(url("worker_stop", "w1"))
    assert response["Location"] == url("worker", "w1")
    assert texts(response) == ["Asked worker w1 to stop: it gives its running jobs back and "
                               "exits."]
    assert qc.workers.info("w1")[0]["request"] == "stop"


def test_unknown_and_dead_workers_get_a_plain_message(mc: Client, qc: Any) -> None:
    response = mc.post(url("worker_stop", "nobody"), HTTP_REFERER="/qless/workers/")
    assert response.status_code == 302 and response["Location"] == "/qless/workers/"
    assert texts(response) == ["Worker nobody is not known: nothing to ask."]
    hello(qc, "w-old", ago=600)
    response = mc.post(url("worker_quiet", "w-old"))
    assert texts(response)[-1] == "Worker w-old is dead (no contact for a while): nothing to ask."
    assert qc.workers.info("w-old")[0]["request"] == ""


def test_viewers_and_forged_posts_are_refused(qc: Any, viewer: Any, manager: Any,
                                              as_user: Any) -> None:
    hello(qc, "w1")
    assert as_user(viewer).post(url("worker_stop", "w1")).status_code == 403
    assert as_user(manager, csrf=True).post(url("worker_stop", "w1")).status_code == 403
    assert qc.workers.info("w1")[0]["request"] == ""


def test_buttons_show_for_live_workers_only(mc: Client, qc: Any) -> None:
    hello(qc, "w1")
    hello(qc, "w-old", ago=600)
    page = mc.get(url("workers")).content.decode()
    assert url("worker_quiet", "w1") in page and url("worker_stop", "w1") in page
    assert url("worker_stop", "w-old") not in page


def test_worker_page_version_follows_its_state(mc: Client, qc: Any, client: Client) -> None:
    hello(qc, "w1")
    html = mc.get(url("worker", "w1")).content.decode()
    api = url("api_worker_page", "w1")
    assert f'data-live-src="{api}"' in html
    version = mc.get(api).json()["version"]
    assert f'data-live-version="{version}"' in html
    assert mc.get(api).json()["version"] == version  # nothing changed: no reload
    qc.workers.beat("w1", "draining")
    assert mc.get(api).json()["version"] != version
    assert client.get(api).status_code == 401
    assert mc.get(url("api_worker_page", "nobody")).status_code == 404


@pytest.mark.browser
def test_browser_worker_page_shows_draining_live(page: Any, qc: Any) -> None:
    hello(qc, "w1")
    page.goto(f"{page.base}{url('worker', 'w1')}")
    wait_live(page)
    assert "draining" not in page.inner_text("#qless-worker-live h2")
    qc.workers.beat("w1", "draining")
    page.wait_for_function("() => /draining/.test("
                           "document.querySelector('#qless-worker-live h2').textContent)")
    assert "This worker is draining" in page.inner_text("#qless-worker-live")
