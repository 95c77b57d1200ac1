"""``@job`` and the ``django.tasks`` backend check and encode arguments alike; eager runs at
once; a handle says when a rollback discarded its job."""

from __future__ import annotations

import datetime as dt
import decimal
import socket

import pytest
from django.db import transaction
from django.test import override_settings

from django_qless.clients import clients, get_client
from django_qless.testing import eager, run_queued
from tests.app import jobs, tasks

WHEN = dt.datetime(2026, 11, 24, 9, 30, tzinfo=dt.UTC)
AMOUNT = decimal.Decimal("1.50")


@pytest.mark.django_db(transaction=True)
def test_datetimes_and_decimals_are_sent_the_same_way_by_both():
    handle = jobs.kinds.enqueue(WHEN, AMOUNT)
    result = tasks.kinds.enqueue(WHEN, AMOUNT)
    client = get_client()
    job_args = client.jobs[handle.jid].data["args"]
    task_args = client.jobs[result.id].data["args"]
    assert job_args == task_args == ["2026-11-24T09:30:00Z", "1.50"]
    run_queued()
    expected = ["str", "str", "2026-11-24T09:30:00Z", "1.50"]
    assert handle.result() == expected
    assert tasks.kinds.get_backend().get_result(result.id).return_value == expected


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(("call", "pattern"), [
    (lambda: tasks.multiply.enqueue(1), r"^tests\.app\.tasks\.multiply\(\): missing a required "
                                        r"argument: 'b'$"),
    (lambda: tasks.multiply.enqueue(1, 2, 3), r"^tests\.app\.tasks\.multiply\(\): too many "
                                              r"positional arguments$"),
    (lambda: tasks.multiply.enqueue(1, 2, c=2), r"^tests\.app\.tasks\.multiply\(\): got an "
                                             r"unexpected keyword argument 'c'$"),
    (lambda: tasks.with_context.enqueue(), r"missing a required argument: 'value'$"),
    (lambda: jobs.add.enqueue(), r"^tests\.app\.jobs\.add\(\): missing a required argument: "
                                 r"'a'$"),
])
def test_both_check_arguments_against_the_signature(r, call, pattern):
    with pytest.raises(TypeError, match=pattern):
        call()
    assert r.keys("ql:j:*") == []


@pytest.mark.django_db(transaction=True)
def test_a_context_task_takes_its_arguments_after_the_context():
    result = tasks.with_context.enqueue(5)
    run_queued()
    value = tasks.with_context.get_backend().get_result(result.id).return_value
    assert value["value"] == 5


@pytest.mark.django_db  # a transaction that never commits, as pytest-django's default
def test_eager_runs_at_once_when_the_test_transaction_never_commits():
    with eager():
        handle = jobs.add.enqueue(2, b=3)
    assert handle.status == "eager" and handle.result() == 5


@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_a_discarded_handle():
    try:
        with transaction.atomic():
            handle = jobs.add.enqueue(1)
            assert handle.status == "pending"
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    assert handle.status == "discarded" and handle.state() is None


@pytest.mark.django_db(transaction=True)
def test_a_send_that_fails_at_commit_leaves_an_error_handle():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with override_settings(QLESS={"default": {"URL": f"redis://127.0.0.1:{port}/0"}}):
        clients.close_all()
        with pytest.raises(Exception), transaction.atomic():  # noqa: B017, PT011
            handle = jobs.add.enqueue(1)
        assert handle.status == "error"
    clients.close_all()
