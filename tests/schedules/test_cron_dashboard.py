"""The dashboard's schedules page: next runs listed, "run now" for managers only, no 500s."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from tests.ui.conftest import (  # noqa: F401 - the dashboard fixtures
    as_user,
    manager,
    mc,
    qc,
    qless_settings,
    viewer,
)

__all__: list[str] = []

pytestmark = pytest.mark.django_db


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def texts(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.fixture
def nightly(qc: Any) -> str:  # noqa: F811
    qc.schedules.register("nightly", "app.Nightly", cron="30 2 * * *", queue="q",
                          timezone="Europe/Paris", missed="catchup", catchup=2)
    return "nightly"


def test_page_lists_next_runs(mc: Client, nightly: str) -> None:  # noqa: F811
    """Three run times at 02:30 Paris time, the policy, and a Run now button."""
    page = mc.get(url("schedules")).content.decode()
    assert 'data-schedule="nightly"' in page and "30 2 * * *" in page
    assert page.count(" 02:30 CE") == 3 and "catchup (at most 2)" in page
    assert "Run now" in page and "csrfmiddlewaretoken" in page


def test_run_now_puts_a_job(mc: Client, qc: Any, nightly: str) -> None:  # noqa: F811
    """POST runs one job now and says so on the page."""
    response = mc.post(url("schedule_run", nightly))
    assert response.status_code == 302 and response["Location"] == url("schedules")
    assert texts(response) == ["Put job nightly-1 of schedule nightly now."]
    assert qc.queues["q"].counts["waiting"] == 1


def test_run_now_of_an_unknown_schedule_is_a_message(mc: Client) -> None:  # noqa: F811
    """A refused run is a message and a redirect, never a 500."""
    response = mc.post(url("schedule_run", "gone"), HTTP_REFERER=url("schedules"))
    assert response.status_code == 302
    assert texts(response) == ["No cron schedule 'gone'."]


def test_run_now_needs_post_and_manage_permission(
    as_user: Any, viewer: Any, mc: Client, qc: Any, nightly: str,  # noqa: F811
) -> None:
    """GET is refused (405); a viewer sees no button and is refused (403)."""
    assert mc.get(url("schedule_run", nightly)).status_code == 405
    view = as_user(viewer)
    assert "Run now" not in view.get(url("schedules")).content.decode()
    assert view.post(url("schedule_run", nightly)).status_code == 403
    assert qc.queues["q"].counts["waiting"] == 0


def test_run_now_checks_csrf(as_user: Any, manager: Any, qc: Any, nightly: str  # noqa: F811
                             ) -> None:
    """Without the CSRF token the action is refused."""
    strict = as_user(manager, csrf=True)
    assert strict.post(url("schedule_run", nightly)).status_code == 403
    assert qc.queues["q"].counts["waiting"] == 0


def test_empty_page(mc: Client) -> None:  # noqa: F811
    assert "No cron schedules." in mc.get(url("schedules")).content.decode()


def test_recurring_pages_show_a_schedule_without_error(mc: Client, nightly: str  # noqa: F811
                                                       ) -> None:
    """A schedule is also a recurring job: its pages render; an interval edit is refused."""
    assert 'nightly' in mc.get(url("recurring")).content.decode()
    assert mc.get(url("recurring_detail", nightly)).status_code == 200
    response = mc.post(url("recurring_detail", nightly),
                       {"interval": 60, "priority": 0, "retries": 5, "tags": ""})
    assert response.status_code == 302
    assert any("cron schedule" in t for t in texts(response))
