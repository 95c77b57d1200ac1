"""Jobs a worker would never import, and Django settings django-qless never reads."""

from __future__ import annotations

from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from django_qless import checks
from django_qless.clients import get_client
from django_qless.conf import get_problems
from django_qless.core.registry import default_registry
from django_qless.registry import setup
from django_qless.testing import run_queued

STRAY_APPS = [*settings.INSTALLED_APPS, "tests.strayapp"]


def ids(messages: list) -> list[str]:
    return [m.id for m in messages]


def test_a_job_in_tasks_py_is_warned_about_at_check_time():
    with override_settings(INSTALLED_APPS=STRAY_APPS):
        messages = checks.check_stray_jobs()
        assert ids(messages) == ["django_qless.W061"]
        assert "tests.strayapp.tasks defines @job shout" in messages[0].msg
        assert "tests/strayapp/tasks.py to jobs.py" in messages[0].hint
        assert "QLESS['JOB_MODULES']" in messages[0].hint
        out = StringIO()
        call_command("check", "--tag", "django_qless", stdout=out, stderr=out)
        assert "django_qless.W061" in out.getvalue()


def test_django_tasks_in_tasks_py_are_not_jobs():
    # tests.app.tasks holds django.tasks @task functions: nothing to warn about.
    assert checks.check_stray_jobs() == []


@pytest.mark.django_db(transaction=True)
def test_listing_the_module_in_job_modules_silences_the_warning_and_runs_it():
    qless = {**settings.QLESS, "JOB_MODULES": [*settings.QLESS.get("JOB_MODULES", []),
                                               "tests.strayapp.tasks"]}
    before = default_registry.module_prefixes
    try:
        with override_settings(INSTALLED_APPS=STRAY_APPS, QLESS=qless):
            assert checks.check_stray_jobs() == []
            setup(force=True)
            get_client().queues["stray"].put("tests.strayapp.tasks.shout", {
                "args": ["hi"], "kwargs": {}})
            [outcome] = run_queued(["stray"])
            assert (outcome.outcome, outcome.result) == ("completed", "HI"), outcome.error
    finally:
        default_registry._prefixes[:] = before
        default_registry.unregister("tests.strayapp.tasks.shout")
        setup(force=True)


@pytest.mark.django_db(transaction=True)
def test_the_worker_failure_for_such_a_job_says_what_to_do():
    with override_settings(INSTALLED_APPS=STRAY_APPS):
        setup(force=True)
        get_client().queues["stray"].put("tests.strayapp.tasks.nope", {})
        [outcome] = run_queued(["stray"])
    assert outcome.outcome == "unknown"
    message = str(outcome.error)
    assert "not a registered job" in message
    assert "move it to tests.strayapp.jobs" in message and "JOB_MODULES" in message


def test_a_misspelt_default_alias_is_an_error_suggesting_default():
    with override_settings(QLESS={"defualt": {"URL": "redis://localhost:6379/0"}}):
        [problem] = get_problems()
        assert problem.id == "django_qless.E057"
        assert "did you mean 'default'?" in problem.message
        with pytest.raises(SystemCheckError, match="E057"):
            call_command("check", stdout=StringIO(), stderr=StringIO())


def test_aliases_without_default_are_a_warning():
    with override_settings(QLESS={"reports": {"URL": "redis://localhost:6379/1"}}):
        [problem] = get_problems()
        assert problem.id == "django_qless.W058" and problem.warning


def test_a_misspelt_global_key_suggests_the_right_one():
    with override_settings(QLESS={**settings.QLESS, "QUEUS": {}}):
        [problem] = get_problems()
        assert "did you mean 'QUEUES'?" in problem.message


def test_a_qless_url_django_setting_is_reported_as_ignored():
    with override_settings(QLESS_URL="redis://elsewhere:6379/0", QLESS_EAGER=True):
        messages = checks.check_stray_settings()
    assert ids(messages) == ["django_qless.W062", "django_qless.W062"]
    assert messages[1].msg.startswith("The Django setting QLESS_URL is ignored")
    assert "environment variable QLESS_URL" in messages[1].hint
    assert "QLESS = {\"default\": {\"URL\": ...}}" in messages[1].hint
    assert checks.check_stray_settings() == []


@pytest.mark.django_db(transaction=True)
def test_a_real_worker_warns_at_start_and_its_failure_says_what_to_do(redis_url):
    import subprocess
    import sys

    from tests.app.helpers import ROOT, command_env

    env = {**command_env(redis_url), "DJANGO_SETTINGS_MODULE": "tests.strayapp.settings"}
    jid = get_client().queues["stray"].put("tests.strayapp.tasks.shout",
                                           {"args": ["hi"], "kwargs": {}})
    result = subprocess.run([sys.executable, "-m", "django", "qless_worker", "stray", "-p", "0",
                             "--max-jobs", "1"], cwd=ROOT, env=env, text=True,
                            capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "django_qless.W061" in result.stderr and "tests.strayapp.tasks" in result.stderr
    failure = get_client().jobs[jid].failure
    assert failure["group"] == "django_qless.UnknownJob"
    assert "move it to tests.strayapp.jobs" in failure["message"]
