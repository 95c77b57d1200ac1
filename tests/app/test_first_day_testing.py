"""``run_queued()`` in an ordinary ``django_db`` test, whose transaction never commits."""

from __future__ import annotations

import pytest
from django.db import transaction

from django_qless.clients import get_client
from django_qless.testing import run_queued, send_pending
from tests.app import jobs


@pytest.mark.django_db
def test_run_queued_sends_what_waits_for_the_commit_then_runs_it():
    handle = jobs.add.enqueue(2, b=3)
    assert handle.status == "pending"  # the test's transaction never commits
    outcomes = run_queued()
    assert [(o.klass, o.outcome, o.result) for o in outcomes] == [
        ("tests.app.jobs.add", "completed", 5)]
    assert handle.status == "enqueued" and handle.result() == 5
    assert run_queued() == []  # sent once: nothing is left waiting


@pytest.mark.django_db
def test_a_rolled_back_enqueue_stays_unsent():
    kept = jobs.add.enqueue(1)
    try:
        with transaction.atomic():
            dropped = jobs.add.enqueue(100)
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert dropped.status == "discarded"
    assert [o.jid for o in run_queued()] == [kept.jid]
    assert dropped.status == "discarded"


@pytest.mark.django_db
def test_send_pending_only_sends_and_leaves_other_callbacks_alone():
    ran: list[str] = []
    transaction.on_commit(lambda: ran.append("mine"))
    handle = jobs.echo.enqueue("x")
    assert send_pending() == 1 and send_pending() == 0
    assert handle.status == "enqueued" and ran == []
    assert get_client().queues["other"].counts["waiting"] == 1
    connection = transaction.get_connection()
    assert len(connection.run_on_commit) == 1  # the test's own callback is still there
