"""The operator's tools on a sharded alias: emptying a queue and acting on all matching
failed jobs reach every shard; tag counts are summed over the shards."""

from __future__ import annotations

import re
from typing import Any

import pytest

from django_qless.core.client import Client
from tests.cluster.test_dashboard_cluster import sharded  # noqa: F401 - the shared fixture

pytestmark = pytest.mark.django_db


def fail_in(client: Client, queue: str, jid: str) -> None:
    client.queues[queue].put("tests.Job", {}, jid=jid, priority=100)
    job = client.queues[queue].pop()
    assert job is not None and job.jid == jid
    job.fail("boom.Error", "boom")


def test_empty_reaches_every_shard_and_counts_sum(sharded: Any, admin_client: Any) -> None:  # noqa: F811
    t = sharded.tags
    home, stray = sharded.shard(t[0]), sharded.shard(t[1])
    home.queues["alpha"].put("tests.Job", {}, jid="more-alpha", tags=["shared"])
    fail_in(home, "alpha", "failed-home")
    fail_in(stray, "alpha", "failed-stray")  # left in another shard, e.g. by a queue move
    page = admin_client.get("/qless/queues/alpha/empty/").content.decode()
    assert re.search(r'data-state="waiting">.*?<td>2</td>', page)
    assert re.search(r'data-state="failed">.*?<td>2</td>', page)
    tags = admin_client.get("/qless/tags/").content.decode()
    assert re.search(r">shared</a> <span[^>]*>4<", tags)
    text = admin_client.post("/qless/queues/alpha/empty/", follow=True).content.decode()
    assert "Emptied queue alpha: canceled 4 jobs (2 waiting, 2 failed)." in text
    assert home.jobs.get("failed-home") is None and stray.jobs.get("failed-stray") is None
    assert sharded.shard(t[1]).jobs["job-beta"].state == "waiting"


def test_retry_all_matching_reads_every_shard(sharded: Any, admin_client: Any) -> None:  # noqa: F811
    t = sharded.tags
    fail_in(sharded.shard(t[0]), "alpha", "fa")
    fail_in(sharded.shard(t[3]), "gamma", "fg")
    confirm = admin_client.get("/qless/bulk/all/", {"group": "boom.Error"}).content.decode()
    assert "2 jobs match." in confirm
    response = admin_client.post("/qless/bulk/all/", {"group": "boom.Error",
                                                      "action": "retry"}, follow=True)
    assert "Retried 2 jobs." in response.content.decode()
    assert sharded.shard(t[0]).jobs["fa"].state == "waiting"
    assert sharded.shard(t[3]).jobs["fg"].state == "waiting"
