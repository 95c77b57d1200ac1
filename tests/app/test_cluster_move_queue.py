"""`manage.py qless move-queue` on a sharded alias over the session's real clusters."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from django_qless.clients import get_client
from django_qless.core.cluster.sharded import ShardedClient
from tests.app import jobs
from tests.app.test_cluster_django import local, on_cluster  # noqa: F401 - fixtures

__all__: list[str] = []


def test_move_queue_moves_a_queue_and_its_jobs(on_cluster):  # noqa: F811 - the fixture
    handle = jobs.echo.using(queue="delta", on_commit=False).enqueue(1)
    sharded = get_client()
    assert isinstance(sharded, ShardedClient)
    sharded.placement.cache_seconds = 0.2
    before = sharded.shard_of("delta")
    target = next(tag for tag in sharded.tags if tag != before)
    out, err = io.StringIO(), io.StringIO()
    call_command("qless", "move-queue", "delta", target, "--json", stdout=out, stderr=err)
    [progress] = json.loads(out.getvalue())
    assert (progress["source"], progress["target"], progress["copied"]) == (before, target, 1)
    assert "delta " + before + " -> " + target + ": done" in err.getvalue()
    assert sharded.shard_of("delta") == target
    assert sharded.shard(target).jobs[handle.jid].queue_name == "delta"
    assert sharded.shard(before).jobs.get(handle.jid) is None


def test_move_queue_refuses_a_pinned_queue(on_cluster):  # noqa: F811 - the fixture
    with pytest.raises(CommandError, match="'alpha' is pinned to s0-320 by the placement"):
        call_command("qless", "move-queue", "alpha", "2")


def test_move_queue_refuses_a_queue_that_never_existed(on_cluster):  # noqa: F811 - the fixture
    sharded = get_client()
    assert isinstance(sharded, ShardedClient)
    before = sharded.placement.recorded()
    with pytest.raises(CommandError, match="no queue 'nosuch' on any shard") as caught:
        call_command("qless", "move-queue", "nosuch", "2")
    assert caught.value.returncode == 2
    assert sharded.placement.recorded() == before
