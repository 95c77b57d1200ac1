"""The django.tasks / django_tasks backend: enqueue, defer, priority, results, signals."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

from django_qless.clients import get_client
from django_qless.tasks_backend import QlessBackend
from django_qless.testing import run_queued
from tests.app import tasks
from tests.app.helpers import manage, spawn

try:
    from django.tasks import TaskResultStatus, task_backends
    from django.tasks.exceptions import InvalidTask as InvalidTaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
except ImportError:
    from django_tasks import TaskResultStatus, task_backends
    from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def captured():
    seen: list[tuple[str, object, object]] = []

    def make(name):
        def receive(sender, task_result, **kwargs):
            seen.append((name, sender, task_result.status))
        return receive

    receivers = [(sig, make(name)) for name, sig in (
        ("enqueued", task_enqueued), ("started", task_started), ("finished", task_finished))]
    for sig, fn in receivers:
        sig.connect(fn)
    yield seen
    for sig, fn in receivers:
        sig.disconnect(fn)


def test_backend_is_configured_with_capabilities():
    backend = task_backends["default"]
    assert isinstance(backend, QlessBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_enqueue_puts_a_job_named_after_the_task_and_returns_a_ready_result(captured):
    result = tasks.multiply.enqueue(6, 7)
    assert result.status == TaskResultStatus.READY and result.enqueued_at is not None
    job = get_client().jobs[result.id]
    assert job.klass_name == "tests.app.tasks.multiply" and job.queue_name == "default"
    assert job.data["task_path"] == "tests.app.tasks.multiply" and job.data["args"] == [6, 7]
    assert captured == [("enqueued", QlessBackend, TaskResultStatus.READY)]
    fetched = tasks.multiply.get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.args == [6, 7]


def test_priority_queue_and_defer():
    urgent = tasks.urgent.enqueue("x")
    job = get_client().jobs[urgent.id]
    assert (job.queue_name, job.priority) == ("tasks", 50)
    later = tasks.multiply.using(run_after=timezone.now() + timedelta(minutes=10)).enqueue(1, 1)
    assert get_client().jobs[later.id].state == "scheduled"
    with pytest.raises(InvalidTaskError):
        tasks.multiply.using(queue_name="unknown")


def test_results_after_running_in_process(captured):
    ok = tasks.multiply.enqueue(3, 4)
    bad = tasks.explode.enqueue()
    ctx = tasks.with_context.enqueue(9)
    aio = tasks.async_double.enqueue(21)
    run_queued(["default"])
    done = tasks.multiply.get_result(ok.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 12
    assert done.enqueued_at <= done.started_at <= done.finished_at
    assert done.worker_ids == [get_client().worker_name] and done.attempts == 1
    failed = tasks.explode.get_result(bad.id)
    assert failed.status == TaskResultStatus.FAILED and failed.finished_at is not None
    assert failed.errors[0].exception_class_path == "builtins.KeyError"
    assert failed.errors[0].exception_class is KeyError and "nope" in failed.errors[0].traceback
    assert tasks.with_context.get_result(ctx.id).return_value == {
        "id": ctx.id, "attempt": 1, "value": 9}
    assert tasks.async_double.get_result(aio.id).return_value == 42
    names = [(n, s) for n, _, s in captured if n != "enqueued"]
    assert ("started", TaskResultStatus.RUNNING) in names
    assert ("finished", TaskResultStatus.SUCCESSFUL) in names
    assert ("finished", TaskResultStatus.FAILED) in names
    ok.refresh()
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 12


def test_results_after_a_real_worker(redis_url, tmp_path):
    result = tasks.multiply.enqueue(5, 5)
    out = manage(redis_url, "qless_worker", "default", "--processes", "0", "--max-jobs", "1",
                 QLESS_TEST_DB=str(tmp_path / "db"))
    assert out.returncode == 0, out.stderr
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 25
    assert result.worker_ids and result.worker_ids[0] != get_client().worker_name


def task_statuses(log):
    """Return the task statuses the worker's task signals wrote to `log` (job signals too)."""
    lines = log.read_text().splitlines() if log.exists() else []
    return [e["status"] for e in map(json.loads, lines) if "status" in e]


def test_a_worker_stopped_mid_task_does_not_report_it_failed(redis_url, tmp_path):
    import signal
    import time

    log = tmp_path / "tasks.jsonl"
    result = tasks.sleepy.enqueue(30)
    proc = spawn(redis_url, "qless_worker", "default", "--processes", "0", "--term-grace", "0",
                 QLESS_TEST_DB=str(tmp_path / "db"), QLESS_TEST_SIGNAL_LOG=str(log))
    try:
        deadline = time.monotonic() + 20
        while not task_statuses(log) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert task_statuses(log), "the task never started"
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert task_statuses(log) == [str(TaskResultStatus.RUNNING)]
    assert get_client().jobs[result.id].state == "waiting"
    result.refresh()
    assert result.status == TaskResultStatus.READY


def test_unknown_and_canceled_results_do_not_exist():
    backend = task_backends["default"]
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("0" * 32)
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result("not a jid!")
    result = tasks.multiply.enqueue(1, 2)
    get_client().jobs[result.id].cancel()
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(result.id)
    other = get_client().queues["default"].put("tests.app.jobs.add", {"args": [1]})
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(other)


def test_enqueue_waits_for_commit(captured):
    with transaction.atomic():
        result = tasks.multiply.enqueue(2, 2)
        assert result.enqueued_at is None and get_client().jobs.get(result.id) is None
        assert captured == []
    assert get_client().jobs.get(result.id) is not None
    assert result.enqueued_at is not None and captured[0][0] == "enqueued"
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = tasks.multiply.enqueue(2, 3)
        raise RuntimeError
    assert get_client().jobs.get(dropped.id) is None


def test_backend_check_and_data_is_json():
    backend = task_backends["default"]
    assert list(backend.check()) == []
    result = tasks.multiply.enqueue(1, 1)
    raw = get_client().jobs[result.id].raw_data
    assert json.loads(raw)["backend"] == "default"


def test_job_moved_to_an_unlisted_queue_is_still_readable():
    result = tasks.multiply.enqueue(2, 2)
    get_client().jobs[result.id].move("elsewhere")
    fetched = task_backends["default"].get_result(result.id)
    assert fetched.status == TaskResultStatus.READY and fetched.task.queue_name == "default"


def test_backend_check_reports_bad_queue_names_and_aliases():
    from django.test import override_settings

    tasks_setting = {"default": {"BACKEND": "django_qless.tasks_backend.QlessBackend",
                                 "QUEUES": ["default", "bad queue"],
                                 "OPTIONS": {"CLIENT": "nope"}}}
    with override_settings(TASKS=tasks_setting):
        ids = [m.id for m in task_backends["default"].check()]
    assert ids == ["django_qless.E091", "django_qless.E092"]
