"""Enqueue waits for the transaction to commit on every path."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.db import transaction
from django.test import TestCase, override_settings
from django.utils import timezone

from django_qless.clients import get_client
from tests.app import jobs


def all_jobs(redis_url: str) -> list[str]:
    conn = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        return sorted(k for k in conn.keys("ql:j:*") if k.count(":") == 2
                      and not k.endswith(("-history", "-dependents", "-dependencies")))
    finally:
        conn.close()


def every_path() -> list[str]:
    """Enqueue through every API; return the jids."""
    dep = jobs.add.enqueue(0)
    handles = [
        dep,
        jobs.add.enqueue_in(timedelta(seconds=30), 1),
        jobs.add.enqueue_at(timezone.now() + timedelta(minutes=1), 2),
        jobs.add.using(depends=[dep.jid]).enqueue(3),
        jobs.add.recur(60, 4),
        jobs.Thumbnail.enqueue({"width": 1}),
        jobs.dedupe.enqueue("k"),
    ]
    assert {h.status for h in handles} == {"pending"}
    return [h.jid for h in handles]


class OnCommitTestCase(TestCase):
    """Inside TestCase every test is atomic: callbacks are captured, not run."""

    def test_jobs_are_sent_only_when_callbacks_run(self):
        with self.captureOnCommitCallbacks(execute=False) as callbacks:
            jids = every_path()
        assert len(callbacks) == 7
        client = get_client()
        assert client.jobs.get(jids[0]) is None and client.jobs.recurring(jids[4]) is None
        for callback in callbacks:
            callback()
        assert client.jobs.get(jids[0]).state == "waiting"
        assert client.jobs.get(jids[3]).state == "depends"
        assert client.jobs.get(jids[1]).state == "scheduled"
        assert client.jobs.recurring(jids[4]) is not None

    def test_execute_true_sends_them(self):
        with self.captureOnCommitCallbacks(execute=True):
            handle = jobs.add.enqueue(1)
        assert handle.status == "enqueued" and handle.state() == "waiting"

    def test_immediate_mode_globally_and_per_call(self):
        handle = jobs.add.using(on_commit=False).enqueue(1)
        assert handle.status == "enqueued"
        handle = jobs.add.using(commit_mode="immediate").enqueue_in(5, 1)
        assert handle.state() == "scheduled"
        with override_settings(QLESS={**settings.QLESS, "COMMIT_MODE": "immediate"}):
            assert jobs.add.enqueue(2).status == "enqueued"


@pytest.mark.django_db(transaction=True)
def test_rolled_back_transaction_enqueues_nothing(redis_url):
    with pytest.raises(RuntimeError):
        with transaction.atomic():
            every_path()
            raise RuntimeError("rollback")
    assert all_jobs(redis_url) == []
    assert get_client().redis.keys("ql:r:*") == []


@pytest.mark.django_db(transaction=True)
def test_committed_transaction_enqueues_after_commit_not_before(redis_url):
    with transaction.atomic():
        jids = every_path()
        assert all_jobs(redis_url) == []  # a worker polling now sees nothing
    client = get_client()
    assert [client.jobs.get(j) is not None for j in jids if j != jids[4]] == [True] * 6
    assert client.jobs.recurring(jids[4]) is not None


@pytest.mark.django_db(transaction=True)
def test_inner_savepoint_rollback_discards_only_its_jobs(redis_url):
    with transaction.atomic():
        kept = jobs.add.enqueue(1)
        try:
            with transaction.atomic():
                dropped = jobs.add.enqueue(2)
                raise ValueError
        except ValueError:
            pass
    client = get_client()
    assert client.jobs.get(kept.jid) is not None and client.jobs.get(dropped.jid) is None
    assert dropped.status == "discarded" and kept.status == "enqueued"


@pytest.mark.django_db(transaction=True)
def test_outside_a_transaction_enqueue_is_immediate():
    assert jobs.add.enqueue(1).status == "enqueued"


@pytest.mark.django_db(transaction=True)
def test_redis_down_after_commit_is_logged_with_the_payload(tmp_path, caplog):
    with override_settings(QLESS={"default": {"URL": f"unix://{tmp_path}/gone.sock?db=0"}}):
        caplog.set_level(logging.ERROR, logger="django_qless")
        with pytest.raises(Exception, match="gone.sock|Connection|connect"):
            with transaction.atomic():
                jobs.add.enqueue(41, b=1)
    record = next(r for r in caplog.records if "enqueue after commit failed" in r.getMessage())
    assert "tests.app.jobs.add" in record.getMessage() and "[41]" in record.getMessage()


@pytest.mark.django_db(transaction=True)
def test_invalid_options_fail_at_enqueue_not_after_commit(redis_url):
    from django_qless.core.exceptions import InvalidArgument, LimitExceeded

    with transaction.atomic():
        with pytest.raises(InvalidArgument, match="queue"):
            jobs.add.using(queue="bad queue").enqueue(1)
        with pytest.raises(InvalidArgument, match="priority"):
            jobs.add.using(priority=2**40).enqueue(1)
        with pytest.raises(InvalidArgument, match="jid"):
            jobs.add.using(jid="x/y").enqueue(1)
        with pytest.raises(LimitExceeded, match="1 MiB"):
            jobs.echo.enqueue("x" * (1024 * 1024 + 10))
    assert all_jobs(redis_url) == []


@pytest.mark.django_db(transaction=True)
def test_a_one_step_flow_failing_after_commit_is_logged_in_the_singular(tmp_path, caplog):
    from django_qless.workflows import chain

    with override_settings(QLESS={"default": {"URL": f"unix://{tmp_path}/gone.sock?db=0"}}):
        caplog.set_level(logging.ERROR, logger="django_qless")
        with pytest.raises(Exception, match="gone.sock|Connection|connect"):
            with transaction.atomic():
                chain(jobs.add.s(41, b=1)).enqueue()
    record = next(r for r in caplog.records if "enqueue after commit failed" in r.getMessage())
    assert record.getMessage().endswith(" of 1 step")
