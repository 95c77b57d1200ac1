"""Recurring jobs through handles and ``manage.py qless cancel``."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command

from django_qless.core.recurring import RecurringJob
from tests.app import jobs
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_recurring_handle_has_a_state_a_record_and_cancel():
    handle = jobs.add.recur(3600, 1)
    assert handle.state() == "recurring"
    template = handle.get()
    assert isinstance(template, RecurringJob) and template.interval == 3600
    assert handle.cancel() is True
    assert handle.get() is None and handle.state() is None
    assert handle.cancel() is False


def test_a_handle_rebuilt_from_a_recurring_jid_sees_the_template():
    jid = jobs.add.recur(60, 2).jid
    rebuilt = jobs.add.handle(jid)
    assert rebuilt.state() == "recurring"
    assert rebuilt.cancel() is True and rebuilt.state() is None


def test_cancel_on_a_plain_handle_cancels_the_job():
    handle = jobs.add.enqueue(1)
    assert handle.cancel() is True and handle.state() is None


def test_qless_cancel_stops_a_recurring_job_and_cancels_plain_ones_together():
    recurring = jobs.add.recur(3600, 3)
    plain = jobs.add.enqueue(4)
    out = StringIO()
    call_command("qless", "cancel", recurring.jid, plain.jid, "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"canceled": [plain.jid], "recurring": [recurring.jid]}
    assert recurring.state() is None and plain.state() is None


def test_qless_cancel_of_a_recurring_jid_from_a_real_subprocess(redis_url):
    handle = jobs.add.recur(3600, 5)
    result = manage(redis_url, "qless", "cancel", handle.jid)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{handle.jid} (recurring, stopped)"
    assert handle.state() is None
