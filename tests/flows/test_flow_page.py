"""The dashboard's flow page: members in order with links, retry and cancel; staff only,
CSRF-protected, nothing unescaped; and in a real headless Chromium."""

from __future__ import annotations

from typing import Any

import pytest

from django_qless.clients import get_client
from django_qless.core.client import Client as CoreClient
from django_qless.core.flows import RESULT_KEY, Step, chain, group
from tests.ui.conftest import XSS_PROBES

pytestmark = pytest.mark.django_db(transaction=True)


def failed_flow(klass: str = "tests.Step", result: Any = 1) -> str:
    """Put a -> (b, c) -> d; complete a and c, fail b; return the flow id."""
    qc = get_client()
    flow_id = qc.flows.put(chain(Step(klass, {}, "q"),
                                 group(Step("tests.Step", {}, "q"), Step("tests.Step", {}, "q")),
                                 Step("tests.Step", {}, "q", receive=True)))
    worker = CoreClient(qc.redis, worker_name="w1")
    first = worker.queues["q"].pop()
    first.data[RESULT_KEY] = result
    first.complete()
    for job in worker.queues["q"].pop(2):
        if job.jid == f"{flow_id}-1":
            job.fail("flows.Boom", "boom")
        else:
            job.complete()
    return flow_id


def test_viewer_sees_members_with_links_and_no_actions(viewer, as_user) -> None:
    flow_id = failed_flow()
    response = as_user(viewer).get(f"/qless/flows/{flow_id}/")
    assert response.status_code == 200
    html = response.content.decode()
    assert f"failed at {flow_id}-1" in html
    for i in range(4):
        assert f'href="/qless/jobs/{flow_id}-{i}/"' in html
    assert "flows.Boom" in html and "Retry failed members" not in html
    job_page = as_user(viewer).get(f"/qless/jobs/{flow_id}-2/").content.decode()
    assert f'href="/qless/flows/{flow_id}/"' in job_page
    assert as_user(viewer).post(f"/qless/flows/{flow_id}/cancel/").status_code == 403


def test_access_is_staff_only_and_unknown_flows_are_404(plain, mc, as_user) -> None:
    flow_id = failed_flow()
    assert as_user(plain).get(f"/qless/flows/{flow_id}/").status_code == 403
    gone = mc.get("/qless/flows/fl0123456789abcdef01234567.3/")
    assert gone.status_code == 200 and b"No member of this flow is left" in gone.content
    assert mc.get("/qless/flows/notaflow/").status_code == 404
    assert mc.get(f"/qless/flows/{flow_id}x/").status_code == 404
    assert mc.get(f"/qless/flows/{flow_id}/cancel/").status_code == 405


def test_actions_need_csrf_then_retry_and_cancel(manager, as_user) -> None:
    flow_id = failed_flow()
    strict = as_user(manager, csrf=True)
    assert strict.post(f"/qless/flows/{flow_id}/retry/").status_code == 403
    assert get_client().jobs[f"{flow_id}-1"].state == "failed"
    client = as_user(manager)
    assert client.post(f"/qless/flows/{flow_id}/retry/").status_code == 302
    assert get_client().jobs[f"{flow_id}-1"].state == "waiting"
    assert client.post(f"/qless/flows/{flow_id}/cancel/").status_code == 302
    state = get_client().flows.get(flow_id)
    assert state is not None and [m.state for m in state.members] == [
        "complete", None, "complete", None]


def test_class_names_and_results_are_escaped(mc) -> None:
    probe = XSS_PROBES[0]
    flow_id = failed_flow(klass=probe, result=XSS_PROBES[1])
    html = mc.get(f"/qless/flows/{flow_id}/").content.decode()
    assert probe not in html and "&lt;script&gt;" in html
    assert XSS_PROBES[1] not in html


@pytest.mark.browser
def test_flow_page_in_a_browser_retries_then_cancels(page: Any) -> None:
    flow_id = failed_flow()
    page.goto(f"{page.base}/qless/flows/{flow_id}/")
    assert page.inner_text(".qless-flow-status") == f"failed at {flow_id}-1"
    states = page.locator("tr.qless-flow-member").evaluate_all(
        "rows => rows.map(r => r.dataset.state)")
    assert states == ["complete", "failed", "complete", "depends"]
    page.click("button:text('Retry failed members')")
    page.wait_for_selector("text=Retried 1 failed member.")
    assert page.inner_text(".qless-flow-status") == "running"
    page.accept = True
    page.click("button:text('Cancel the flow')")
    page.wait_for_selector("text=Canceled 2 members.")
    assert page.inner_text(".qless-flow-status") == "canceled"
    page.click(f"a[href='/qless/jobs/{flow_id}-0/']")
    page.wait_for_url(f"**/qless/jobs/{flow_id}-0/")
    assert len(page.dialogs) == 1  # the cancel confirmation, nothing else
