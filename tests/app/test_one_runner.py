"""Eager mode, ``run_queued`` and the worker run a job through the same runner.

Each path is observed doing what only the worker's ``JobRunner`` does: per-job middleware
runs, ``retry_on`` retries, the return value is stored, and an unknown klass fails with the
worker's group and message.
"""

from __future__ import annotations

import pytest

from django_qless.clients import get_client
from django_qless.core.exceptions import UnregisteredJobClass
from django_qless.decorators import JobFunction
from django_qless.registry import UNKNOWN_JOB_GROUP
from django_qless.testing import eager, run_queued
from tests.app import jobs
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)

EXPECTED = {"attempt": 2, "via": "middleware"}
MISSING = "tests.app.nowhere.missing"


def _missing() -> None:
    """A job function never registered under its klass name."""


def test_eager_mode_runs_middleware_retries_and_stores_the_result():
    with eager():
        handle = jobs.runner_probe.enqueue()
    assert handle.status == "eager" and handle.result() == EXPECTED


def test_eager_mode_refuses_an_unknown_klass_as_the_worker_does():
    unknown = JobFunction(_missing, jobs.add.options, name=MISSING, register=False)
    with eager(), pytest.raises(UnregisteredJobClass):
        unknown.enqueue()


def test_run_queued_runs_middleware_retries_and_stores_the_result():
    handle = jobs.runner_probe.enqueue()
    unknown = get_client().queues["runner"].put(MISSING, {})
    outcomes = run_queued("runner")
    assert [o.outcome for o in outcomes] == ["retried", "unknown", "completed"]
    assert outcomes[-1].result == EXPECTED and handle.result() == EXPECTED
    failure = get_client().jobs[unknown].failure
    assert failure["group"] == UNKNOWN_JOB_GROUP and "\nworker: " in failure["message"]


def test_the_worker_runs_middleware_retries_and_stores_the_result(redis_url, tmp_path):
    handle = jobs.runner_probe.enqueue()
    unknown = get_client().queues["runner"].put(MISSING, {})
    result = manage(redis_url, "qless_worker", "runner", "--processes", "0", "--max-jobs", "3",
                    QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
    assert result.returncode == 0, result.stderr
    assert handle.result() == EXPECTED
    failure = get_client().jobs[unknown].failure
    assert failure["group"] == UNKNOWN_JOB_GROUP and "\nworker: " in failure["message"]


def test_a_production_enqueue_does_not_import_the_testing_helpers(redis_url, tmp_path):
    code = ("import sys; from tests.app import jobs; jobs.add.enqueue(1); "
            "print('django_qless.testing' in sys.modules)")
    result = manage(redis_url, "shell", "-c", code, QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == "False"


def test_the_runner_and_the_job_finished_signal_share_one_vocabulary():
    from django_qless.core.workers.runner import Outcome
    from django_qless.core.workers.shutdown import JobAborted
    from django_qless.hooks import outcome_of

    assert outcome_of(None) == Outcome.COMPLETED.value == "completed"
    assert outcome_of(ValueError()) == Outcome.FAILED.value == "failed"
    assert outcome_of(JobAborted("shutdown")) == Outcome.ABORTED.value == "aborted"
