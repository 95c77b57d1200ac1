"""The dashboard of a sharded alias in a real browser, on the session's Redis cluster: the
queue list shows each queue's shard, the shard select narrows it, a job of one shard opens
from the search box by its bare jid and its actions reach that shard. A single server's
pages show no shard at all."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client as DjangoClient
from django.test import override_settings

from django_qless.clients import clients, get_client
from django_qless.core.cluster.sharded import ShardedClient
from django_qless.views import event_buffer
from tests.helpers import wait_until
from tests.ui.browser import save_screens
from testservers.cluster import LocalCluster

SHARDS = 4
PINNED = {"emails": 0, "reports": 1, "billing": 3}  # shards on three different primaries


@pytest.fixture
def sharded(redis_cluster: LocalCluster, qless_settings: str) -> Iterator[ShardedClient]:
    """The default alias sharded over the session's Redis cluster, a few jobs per queue."""
    redis_cluster.heal()
    redis_cluster.flush()
    nodes = [f"redis://127.0.0.1:{n.port}" for n in redis_cluster.running()[:2]]
    clients.close_all()
    with override_settings(QLESS={"default": {"CLUSTER": nodes, "SHARDS": SHARDS,
                                              "PLACEMENT": PINNED},
                                  "JOB_MODULES": ["tests.app.legacy_jobs"]}):
        client = get_client()
        assert isinstance(client, ShardedClient)
        for queue in PINNED:
            for n in range(3):
                client.for_queue(queue).queues[queue].put(
                    f"app.jobs.{queue}", {"n": n}, jid=f"{queue}-{n}", tags=[queue])
        yield client
    clients.close_all()


def queue_rows(page: Any) -> list[tuple[str, str]]:
    """Return (queue, shard) of the overview's queue rows as the browser shows them."""
    cells = page.locator("table.qless-queues tbody tr")
    return [(cells.nth(i).locator("td").nth(0).inner_text(),
             cells.nth(i).locator("td.qless-shard").inner_text())
            for i in range(cells.count())]


def test_the_shard_column_and_filter(sharded: ShardedClient, page: Any, shots: Path) -> None:
    t = sharded.tags
    page.goto(f"{page.base}/qless/")
    assert page.locator("table.qless-queues th", has_text="Shard").count() == 1
    assert queue_rows(page) == [("billing", t[3]), ("emails", t[0]), ("reports", t[1])]
    page.select_option("#qless-shard", t[1])
    page.click(".qless-shard-filter button")
    page.wait_for_url(f"**/qless/?shard={t[1]}")
    assert queue_rows(page) == [("reports", t[1])]
    # The filter follows the nav: the failed list of that shard, then back to all shards.
    assert page.get_attribute("nav.qless-nav a[href^='/qless/failed/']", "href") \
        == f"/qless/failed/?shard={t[1]}"
    page.select_option("#qless-shard", "")
    page.click(".qless-shard-filter button")
    page.wait_for_selector("table.qless-queues tbody tr:nth-child(3)")
    assert len(queue_rows(page)) == 3
    save_screens(page, shots, (("sharded-queues", "/qless/"),))
    assert page.dialogs == []


def test_a_job_of_one_shard_opens_by_jid_and_its_actions_work(sharded: ShardedClient,
                                                              page: Any) -> None:
    billing = sharded.for_queue("billing")
    job = billing.queues["billing"].pop()
    assert job is not None and job.jid == "billing-0"
    job.fail("pay.Declined", "card declined")
    page.goto(f"{page.base}/qless/")
    page.fill("#qless-q", "billing-0")
    page.press("#qless-q", "Enter")
    page.wait_for_url("**/qless/jobs/billing-0/")
    assert page.inner_text("td.qless-shard") == sharded.tags[3]
    page.click("button:text('Retry')")
    page.wait_for_selector("text=Requeued job billing-0")
    assert billing.jobs["billing-0"].state == "waiting"
    page.accept = True  # confirm the cancel
    page.goto(f"{page.base}/qless/jobs/billing-1/")
    page.click("a.qless-danger")
    page.click("button:text('Yes, cancel the job')")
    page.wait_for_selector("text=Canceled job billing-1")
    assert billing.jobs.get("billing-1") is None
    assert billing.jobs["billing-2"].state == "waiting"  # the rest of the shard untouched


def test_a_single_server_shows_no_shard(mc: DjangoClient, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    html = mc.get("/qless/").content.decode()
    assert "qless-shard" not in html and "<th>Shard</th>" not in html
    assert "shard=" not in mc.get("/qless/metrics").content.decode()


def live(page: Any, path: str) -> None:
    page.goto(f"{page.base}{path}")
    page.wait_for_function(
        "() => document.querySelector('[data-live-status]').textContent === 'live events'")


def event_row(page: Any, jid: str) -> Any:
    return page.locator("tr[data-event=put]", has=page.locator(f"a[href='/qless/jobs/{jid}/']"))


def test_the_live_events_page_follows_every_shard(sharded: ShardedClient, page: Any) -> None:
    t = sharded.tags
    live(page, "/qless/events/")
    assert page.locator("table.qless-events th", has_text="Shard").count() == 1
    # emails and billing are on shards of two different primaries.
    for queue, jid in (("emails", "live-e"), ("billing", "live-b")):
        sharded.for_queue(queue).queues[queue].put(f"app.jobs.{queue}", {}, jid=jid)
    event_row(page, "live-e").wait_for()
    event_row(page, "live-b").wait_for()
    assert event_row(page, "live-e").locator("td.qless-shard").inner_text() == t[0]
    assert event_row(page, "live-b").locator("td.qless-shard").inner_text() == t[3]
    # The shard filter narrows the stream to that shard's events.
    live(page, f"/qless/events/?shard={t[3]}")
    for queue, jid in (("emails", "live-e2"), ("billing", "live-b2"), ("emails", "live-e3"),
                       ("billing", "live-b3")):
        sharded.for_queue(queue).queues[queue].put(f"app.jobs.{queue}", {}, jid=jid)
    event_row(page, "live-b3").wait_for()
    assert event_row(page, "live-b2").count() == 1
    assert event_row(page, "live-e2").count() == 0 and event_row(page, "live-e3").count() == 0
    assert page.dialogs == []
    # Leave the page and let its stream end (3 s at most in the tests) while the test's
    # database is still there: the server closes its connections when a response ends.
    page.goto(f"{page.base}/qless/")
    buffer = event_buffer._current
    wait_until(lambda: buffer is None or buffer._readers == 0, 10)
    time.sleep(0.2)  # the response's own end (request_finished) follows the detach


def test_a_flow_across_shards_on_its_page_retries_then_cancels(sharded: ShardedClient,
                                                               page: Any) -> None:
    """emails (s0) -> reports (s1) -> emails: the page reads every shard; retry and cancel
    reach the member's shard and the gate the last member waits behind."""
    from django_qless.core.flows import Flows, Step, chain
    from django_qless.core.flows.gates import GATES_QUEUE

    flows = Flows(sharded)
    flow_id = flows.put(chain(Step("app.jobs.a", {}, "emails"), Step("app.jobs.b", {}, "reports"),
                              Step("app.jobs.c", {}, "emails")))
    emails, reports = sharded.for_queue("emails"), sharded.for_queue("reports")
    first = emails.queues["emails"].pop(10)
    [member] = [job for job in first if job.jid == f"{flow_id}-0"]
    member.complete()  # releases the member on the reports shard
    [second] = [job for job in reports.queues["reports"].pop(10) if job.jid == f"{flow_id}-1"]
    second.fail("flows.Boom", "boom")
    page.goto(f"{page.base}/qless/flows/{flow_id}/")
    assert page.inner_text(".qless-flow-status") == f"failed at {flow_id}-1"
    states = page.locator("tr.qless-flow-member").evaluate_all(
        "rows => rows.map(r => r.dataset.state)")
    assert states == ["complete", "failed", "depends"]
    page.click("button:text('Retry failed members')")
    page.wait_for_selector("text=Retried 1 failed member.")
    assert reports.jobs[f"{flow_id}-1"].state == "waiting"
    page.accept = True
    page.click("button:text('Cancel the flow')")
    page.wait_for_selector("text=Canceled 2 members.")
    assert page.inner_text(".qless-flow-status") == "canceled"
    assert emails.queues[GATES_QUEUE].jobs.scheduled() == []
    assert len(page.dialogs) == 1  # the cancel confirmation only
