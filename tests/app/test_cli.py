"""`manage.py qless ...`: the operator CLI."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_qless.clients import get_client
from django_qless.testing import run_queued
from tests.app import jobs
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)


def qless(*args: str) -> object:
    out = StringIO()
    call_command("qless", *args, "--json", stdout=out)
    return json.loads(out.getvalue())


def test_put_get_list_and_stats():
    jid = qless("put", "default", "tests.app.jobs.add", "--args", "[1]", "--kwargs",
                '{"b": 2}', "--priority", "7", "--tags", "a,b")["jid"]
    job = qless("get", jid)
    assert job["data"] == {"args": [1], "kwargs": {"b": 2}} and job["priority"] == 7
    assert job["tags"] == ["a", "b"] and job["state"] == "waiting"
    assert qless("list", "default")["jids"] == [jid]
    assert qless("list", "--tag", "a") == {"jids": [jid], "total": 1}
    assert qless("stats", "default")[0]["waiting"] == 1
    run_queued()
    assert qless("list", "--state", "complete")["jids"] == [jid]
    assert get_client().jobs[jid].data["result"] == 3


def test_put_refuses_unregistered_klass_and_bad_json():
    with pytest.raises(CommandError, match="not a registered job"):
        qless("put", "default", "os.system")
    with pytest.raises(CommandError, match="invalid JSON"):
        qless("put", "default", "tests.app.jobs.add", "--data", "{nope")
    with pytest.raises(CommandError, match="InvalidArgument"):
        qless("put", "default", "tests.app.jobs.add", "--priority", "1", "--jid", "bad jid")
    assert get_client().redis.keys("ql:j:*") == []


def test_failed_retry_cancel_move_priority_track():
    bad = jobs.boom.enqueue("x")
    run_queued()
    assert qless("failed") == {"builtins.ValueError": 1}
    group = qless("failed", "builtins.ValueError")
    assert group["total"] == 1 and group["jobs"][0]["jid"] == bad.jid
    assert qless("retry", bad.jid) == {"retried": [bad.jid]}
    assert bad.state() == "waiting"
    assert qless("move", bad.jid, "other")["queue"] == "other"
    assert qless("priority", bad.jid, "12")["priority"] == 12
    qless("track", bad.jid)
    assert get_client().jobs[bad.jid].tracked
    qless("untrack", bad.jid)
    assert qless("cancel", bad.jid) == {"canceled": [bad.jid], "recurring": []}
    assert bad.get() is None
    with pytest.raises(CommandError, match="no job"):
        qless("get", bad.jid)


def test_retry_group_requeues_all_failures():
    for _ in range(3):
        jobs.boom.enqueue()
    run_queued()
    assert qless("retry", "--group", "builtins.ValueError", "--queue", "default") == {
        "retried": 3}
    assert len(get_client().queues["default"].jobs.waiting()) == 3


def test_config_pause_and_throttle():
    assert qless("config", "set", "heartbeat", "30") == {"heartbeat": 30}
    assert qless("config", "get", "heartbeat") == 30
    assert qless("config", "get")["heartbeat"] == 30
    qless("config", "unset", "heartbeat")
    assert qless("config", "get", "heartbeat") == 60
    qless("pause", "default", "emails")
    assert get_client().queues["emails"].paused
    qless("unpause", "emails")
    assert not get_client().queues["emails"].paused
    info = qless("throttle", "set", "api", "3", "--ttl", "100")
    assert info["maximum"] == 3 and 0 < info["ttl"] <= 100
    assert qless("throttle", "get", "api")["maximum"] == 3


def test_text_output_from_a_real_subprocess(redis_url):
    jid = jobs.add.enqueue(1).jid
    result = manage(redis_url, "qless", "list", "default")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == jid
    result = manage(redis_url, "qless", "get", "nope")
    assert result.returncode == 1 and "no job nope" in result.stderr


def test_list_with_a_queue_says_complete_and_tag_lists_are_global():
    jobs.add.enqueue(1, b=2)
    with pytest.raises(CommandError, match=r"list --state complete lists every queue's jobs "
                                           r".*drop the queue 'default'"):
        qless("list", "default", "--state", "complete")
    with pytest.raises(CommandError, match=r"list --tag a lists every queue's jobs"):
        qless("list", "default", "--tag", "a")
    assert qless("list", "--state", "complete") == {"jids": [], "total": None}


def test_retry_group_counts_in_the_right_number():
    jobs.boom.enqueue("x")
    run_queued()
    out = StringIO()
    call_command("qless", "retry", "--group", "builtins.ValueError", "--queue", "default",
                 stdout=out)
    assert out.getvalue().strip() == "1 job requeued"
