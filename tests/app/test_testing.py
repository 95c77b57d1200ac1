"""Testing helpers: eager mode (setting, per alias, context manager), build_job, run_queued."""

from __future__ import annotations

import pytest
from django.conf import settings
from django.db import transaction
from django.test import override_settings

from django_qless.core.job import Job
from django_qless.testing import build_job, eager, eager_active, run_queued
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_eager_context_manager_runs_inline_through_json(r):
    with eager():
        handle = jobs.add.enqueue(2, b=3)
        assert handle.status == "eager" and handle.result() == 5
        kinds = jobs.kinds.enqueue(__import__("datetime").date(2026, 1, 1), 1)
        assert kinds.result()[0] == "str"  # arguments went through JSON as in a worker
        with pytest.raises(ValueError, match="inline boom"):
            jobs.boom.enqueue("inline boom")
        thumb = jobs.Thumbnail.enqueue({"width": 3})
        assert thumb.status == "eager"
    assert r.keys("ql:*") == []
    assert jobs.add.enqueue(1).status == "enqueued"


def test_eager_setting_globally_and_per_alias():
    with override_settings(QLESS={**settings.QLESS, "EAGER": True}):
        assert eager_active("default") and jobs.add.enqueue(1).status == "eager"
    per_alias = {**settings.QLESS, "default": {**settings.QLESS["default"], "EAGER": True}}
    with override_settings(QLESS=per_alias):
        assert eager_active("default")
        with eager(False, alias="default"):
            assert not eager_active("default")
            assert jobs.add.enqueue(1).status == "enqueued"


def test_eager_runs_at_once_even_inside_a_transaction():
    with eager(), transaction.atomic():
        handle = jobs.add.enqueue(1, b=1)
        assert handle.status == "eager" and handle.result() == 2
    assert handle.status == "eager"


def test_build_job_makes_a_real_job_without_redis():
    job = build_job(jobs.Thumbnail, {"width": 5}, queue="q", priority=4, tags=["a"])
    assert isinstance(job, Job)
    assert (job.klass_name, job.queue_name, job.priority, job.tags, job.state) == (
        "tests.app.jobs.Thumbnail", "q", 4, ("a",), "running")
    jobs.Thumbnail.process(job)
    assert job.data["size"] == 10
    fn_job = build_job("tests.app.jobs.add", {"args": [1], "kwargs": {"b": 2}})
    assert jobs.add.process(fn_job) == 3 and fn_job.data["result"] == 3


def test_run_queued_drains_chosen_queues_only():
    a = jobs.add.enqueue(1)
    mail = jobs.send_mail.enqueue("x@example.com")
    other = jobs.echo.enqueue("kept")
    out = run_queued(["default", "emails"])
    assert {o.jid: o.outcome for o in out} == {a.jid: "completed", mail.jid: "completed"}
    assert other.state() == "waiting"
    assert run_queued("other")[0].result == "kept"
    assert run_queued() == []


def test_run_queued_reports_unknown_jobs_and_can_raise():
    client = jobs.add.enqueue(1).client
    run_queued()
    jid = client.queues["default"].put("tests.app.not_allowed.Sneaky", {})
    out = run_queued()
    assert out[0].outcome == "unknown"
    assert client.jobs[jid].failure["group"] == "django_qless.UnknownJob"
    jobs.boom.enqueue("raised")
    with pytest.raises(ValueError, match="raised"):
        run_queued(raise_errors=True)
