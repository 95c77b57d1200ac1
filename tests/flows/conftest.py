"""Point QLESS at the session's private Redis and make the flow jobs known."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.test import override_settings

from django_qless.clients import clients
from tests.app.helpers import ROOT, command_env
from tests.ui.conftest import (  # noqa: F401 - the dashboard fixtures, for the flow page
    allow_sync_orm,
    as_user,
    browser,
    manager,
    mc,
    page,
    plain,
    viewer,
)


@pytest.fixture(autouse=True)
def qless_settings(redis_url: str) -> Iterator[str]:
    """Use the flushed test database as the default alias (and forget cached clients)."""
    with override_settings(QLESS={"default": {"URL": redis_url},
                                  "JOB_MODULES": ["tests.flows.jobs"]}):
        yield redis_url
    clients.close_all()


def run_worker(redis_url: str, jobs: int, *queues: str,
               tmp: str) -> subprocess.CompletedProcess[str]:
    """Run `manage.py qless_worker -p 0 --max-jobs <jobs>` on `queues` to completion."""
    env = command_env(redis_url, QLESS_TEST_DB=f"{tmp}/db.sqlite3")
    env["DJANGO_SETTINGS_MODULE"] = "tests.flows.settings"
    result = subprocess.run(
        [sys.executable, "-m", "django", "qless_worker", *queues, "-p", "0",
         "--max-jobs", str(jobs)],
        cwd=ROOT, text=True, capture_output=True, timeout=60, env=env)
    assert result.returncode == 0, result.stderr
    return result
