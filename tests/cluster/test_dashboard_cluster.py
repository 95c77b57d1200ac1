"""The dashboard, the metrics and the events bridge on a sharded alias over a real cluster:
every page reads every shard (or the ``?shard=`` one), a job found by its bare jid is acted
on in its own shard, the Redis page shows each primary once, per-queue metrics carry the
shard, and the bridge turns every shard's events into signals."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import override_settings

from django_qless import signals
from django_qless.bridge import Bridge
from django_qless.clients import clients, get_client
from django_qless.core.cluster.sharded import ShardedClient
from testservers.cluster import LocalCluster

pytestmark = pytest.mark.django_db

SHARDS = 4
# Shards 0, 1 and 3 of four sit in the three primaries' slot ranges; s2 shares one.
PINNED = {"alpha": 0, "beta": 1, "gamma": 3}


@pytest.fixture
def sharded(cluster: LocalCluster) -> Iterator[ShardedClient]:
    """QLESS's default alias on the cluster (4 shards, three queues pinned), a job in each."""
    nodes = [f"redis://127.0.0.1:{n.port}" for n in cluster.running()[:2]]
    clients.close_all()
    with override_settings(QLESS={"default": {"CLUSTER": nodes, "SHARDS": SHARDS,
                                              "PLACEMENT": PINNED},
                                  "JOB_MODULES": ["tests.app.legacy_jobs"]},
                           QLESS_UI={"API_TOKEN": "tok"}):
        client = get_client()
        assert isinstance(client, ShardedClient)
        for queue in PINNED:
            client.for_queue(queue).queues[queue].put("tests.Job", {"q": queue},
                                                      jid=f"job-{queue}", tags=["shared"])
        yield client
    clients.close_all()


def rows(html: str) -> list[tuple[str, str]]:
    """Return (queue, shard) of every row of the overview's queue table."""
    return re.findall(r'<td><a href="/qless/queues/([^/]+)/">[^<]*</a></td>\s*'
                      r'<td class="qless-shard">([^<]*)</td>', html)


def test_the_overview_lists_every_shard_and_filters_one(sharded, admin_client) -> None:
    t = sharded.tags
    html = admin_client.get("/qless/").content.decode()
    assert rows(html) == [("alpha", t[0]), ("beta", t[1]), ("gamma", t[3])]
    assert "<th>Shard</th>" in html and 'id="qless-shard"' in html
    assert html.count('<option value="s') == SHARDS
    only = admin_client.get(f"/qless/?shard={t[1]}").content.decode()
    assert rows(only) == [("beta", t[1])]
    assert f'<option value="{t[1]}" selected>' in only
    assert f'href="/qless/failed/?shard={t[1]}"' in only  # the filter is kept in nav links
    data = admin_client.get(f"/qless/api/overview/?shard={t[3]}").json()
    assert [(q["name"], q["shard"]) for q in data["queues"]] == [("gamma", t[3])]
    assert admin_client.get("/qless/api/overview/").json()["totals"]["waiting"] == 3
    assert rows(admin_client.get("/qless/?shard=nope").content.decode()) == rows(html)


def test_merged_lists_failures_tags_workers_and_completed(sharded, admin_client) -> None:
    for queue in ("alpha", "gamma"):
        job = sharded.for_queue(queue).queues[queue].pop()
        job.fail("boom.Error", f"broke in {queue}")
    beta = sharded.for_queue("beta").queues["beta"].pop()
    beta.complete()
    failed = admin_client.get("/qless/api/failed/").json()
    assert failed["groups"] == [{"group": "boom.Error", "count": 2}]
    group = admin_client.get("/qless/failed/group/boom.Error").content.decode()
    assert "job-alpha" in group and "job-gamma" in group
    assert "job-gamma" not in admin_client.get(
        f"/qless/failed/group/boom.Error?shard={sharded.tags[0]}").content.decode()
    tagged = admin_client.get("/qless/tags/shared").content.decode()
    assert all(f"job-{q}" in tagged for q in PINNED)
    assert "job-beta" in admin_client.get("/qless/completed/").content.decode()
    workers = admin_client.get("/qless/api/workers/").json()["workers"]
    assert workers == [{"name": sharded.worker_name, "jobs": 0, "stalled": 0}]


def test_a_bare_jid_opens_from_search_and_acts_in_its_shard(sharded, admin_client) -> None:
    gamma = sharded.for_queue("gamma")
    job = gamma.queues["gamma"].pop()
    job.fail("boom.Error", "x")
    found = admin_client.get("/qless/search/?q=job-gamma")
    assert found.status_code == 302 and found["Location"] == "/qless/jobs/job-gamma/"
    page = admin_client.get("/qless/jobs/job-gamma/").content.decode()
    assert f'<td class="qless-shard">{sharded.tags[3]}</td>' in page
    retried = admin_client.post("/qless/jobs/job-gamma/retry/")
    assert retried.status_code == 302
    assert gamma.jobs["job-gamma"].state == "waiting"
    # Moving it to a queue of another shard is refused (the engine moves within a shard).
    admin_client.post("/qless/jobs/job-gamma/move/", {"queue": "alpha"})
    assert gamma.jobs["job-gamma"].queue_name == "gamma"
    canceled = admin_client.post("/qless/jobs/job-gamma/cancel/")
    assert canceled.status_code == 302 and gamma.jobs.get("job-gamma") is None
    assert admin_client.get("/qless/jobs/job-gamma/").status_code == 404


def test_queue_pages_use_the_queues_shard(sharded, admin_client) -> None:
    page = admin_client.get("/qless/queues/beta/").content.decode()
    assert f'Shard: <strong class="qless-shard">{sharded.tags[1]}</strong>' in page
    assert "job-beta" in admin_client.get("/qless/queues/beta/waiting/").content.decode()
    assert admin_client.post("/qless/queues/beta/pause/").status_code == 302
    assert sharded.shard(1).queues["beta"].paused
    assert admin_client.get("/qless/queues/nowhere/").status_code == 404


def test_the_redis_page_shows_each_primary_once(cluster, sharded, admin_client) -> None:
    html = admin_client.get("/qless/redis/").content.decode()
    nodes = re.findall(r'data-node="([^"]+)"', html)
    primaries = {f"127.0.0.1:{cluster.primary_for_key(c.keyspace.prefix).port}"
                 for c in sharded.clients()}
    assert len(nodes) == len(set(nodes)) and set(nodes) == primaries


def test_metrics_label_each_queue_with_its_shard(sharded, client) -> None:
    text = client.get("/qless/metrics", HTTP_AUTHORIZATION="Bearer tok").content.decode()
    t = sharded.tags
    assert f'qless_queue_jobs{{queue="beta",shard="{t[1]}",state="waiting"}} 1' in text
    assert f'qless_stats_failures_today{{queue="gamma",shard="{t[3]}"}} 0' in text
    assert "qless_workers 0" in text


def test_the_bridge_sends_the_signals_of_every_shard(sharded, cluster: LocalCluster) -> None:
    seen: list[tuple[str, str | None]] = []
    done = threading.Event()

    def receive(sender: str, jid: str, event: dict[str, Any], client: Any,
                **kwargs: Any) -> None:
        seen.append((jid, client.shard))
        if len(seen) >= 2:
            done.set()

    def subscribers(node: Any) -> set[str]:
        lines = str(node.conn().execute_command("CLIENT", "LIST")).splitlines()
        return {line.split("id=")[1].split()[0] for line in lines if " ssub=0 " not in line}

    # (earlier tests' processes may still hold subscriptions on the session's cluster)
    before = {node.port: subscribers(node) for node in cluster.primaries()}
    signals.job_put.connect(receive, weak=False)
    bridge = Bridge(events=["put"]).start()
    try:
        assert bridge.listener.connects == SHARDS  # every shard subscribed, once
        # One connection per primary (s2 shares one with another shard), not one per shard.
        for node in cluster.primaries():
            opened = subscribers(node) - before[node.port]
            assert len(opened) == 1, opened
        sharded.for_queue("alpha").queues["alpha"].put("tests.Job", {}, jid="new-alpha")
        sharded.for_queue("gamma").queues["gamma"].put("tests.Job", {}, jid="new-gamma")
        assert done.wait(15), seen
    finally:
        bridge.stop()
        signals.job_put.disconnect(receive)
    assert sorted(seen) == [("new-alpha", sharded.tags[0]), ("new-gamma", sharded.tags[3])]
