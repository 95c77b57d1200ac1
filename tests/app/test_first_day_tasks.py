"""django.tasks tasks are shown and found by their own path, and run only when registered."""

from __future__ import annotations

import json

import pytest

from django_qless import registry as django_registry
from django_qless.clients import get_client
from django_qless.core.console import find_by_klass
from django_qless.core.registry import default_registry
from django_qless.tasks_backend import KLASS, TaskJob
from django_qless.testing import run_queued
from tests.app import tasks
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_job_is_named_shown_and_searched_by_the_task_path(redis_url):
    result = tasks.multiply.enqueue(2, 3)
    shown = json.loads(manage(redis_url, "qless", "get", result.id, "--json").stdout)
    assert shown["klass"] == "tests.app.tasks.multiply"
    found, _ = find_by_klass(get_client(), "tests.app.tasks.multiply")
    assert [job.jid for job in found] == [result.id]
    assert find_by_klass(get_client(), KLASS)[0] == []


def test_a_worker_logs_the_task_path(redis_url, tmp_path):
    tasks.explode.enqueue()
    out = manage(redis_url, "qless_worker", "default", "--processes", "0", "--max-jobs", "1",
                 QLESS_TEST_DB=str(tmp_path / "db"))
    assert out.returncode == 0, out.stderr
    assert "tests.app.tasks.explode" in out.stderr
    assert "DjangoTaskJob" not in out.stderr


def test_a_worker_process_registers_the_tasks_it_finds():
    default_registry.unregister("tests.app.tasks.multiply")
    assert "tests.app.tasks.multiply" not in default_registry
    django_registry.setup(force=True)  # as a worker starts: tasks modules are read
    entry = default_registry.resolve("tests.app.tasks.multiply")
    assert isinstance(entry.target, TaskJob) and entry.target.task.func is tasks.multiply.func


def test_jobs_of_the_older_shim_klass_still_run():
    data = {"task_path": "tests.app.tasks.multiply", "args": [4, 5], "kwargs": {},
            "takes_context": False, "backend": "default"}
    get_client().queues["default"].put(KLASS, data)
    [outcome] = run_queued(["default"])
    assert (outcome.klass, outcome.outcome, outcome.result) == (KLASS, "completed", 20)


def test_a_path_that_is_no_registered_task_is_refused():
    data = {"task_path": "os.getcwd", "args": [], "kwargs": {}}
    get_client().queues["default"].put("os.getcwd", data)
    [outcome] = run_queued(["default"])
    assert outcome.outcome == "unknown" and "not a registered job" in str(outcome.error)
