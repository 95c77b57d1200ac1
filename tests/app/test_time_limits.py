"""``@job(timeout=..., soft_timeout=...)``: declared on functions and classes, kept in the
registry, refused when bad, enforced by ``manage.py qless_worker`` over its ``--timeout``."""

from __future__ import annotations

import pytest

from django_qless import SoftTimeLimitExceeded, job
from django_qless.clients import get_client
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.exceptions import SoftTimeLimitExceeded as CoreSoftTimeLimitExceeded
from django_qless.core.registry import TimeLimits, default_registry
from tests.app import jobs
from tests.app.helpers import manage

pytestmark = pytest.mark.django_db(transaction=True)


def test_functions_and_classes_keep_their_limits_in_the_registry():
    assert default_registry.resolve("tests.app.jobs.tidy_up").limits == TimeLimits(30.0, 1.0)
    assert default_registry.resolve("tests.app.jobs.Overrun").limits == TimeLimits(1.0)
    assert default_registry.resolve("tests.app.jobs.add").limits == TimeLimits()
    assert SoftTimeLimitExceeded is CoreSoftTimeLimitExceeded


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        ({"soft_timeout": "5"}, "soft_timeout must be a number of seconds or a timedelta"),
        ({"timeout": 5, "soft_timeout": 5}, r"soft_timeout \(5s\) must be shorter than timeout"),
    ],
)
def test_bad_limits_are_refused_at_the_decorator(options, message):
    with pytest.raises(InvalidArgument, match=message):
        job(**options)


def test_limits_belong_to_the_kind_not_to_a_call(r):
    with pytest.raises(TypeError, match=r"timeout is a time limit of the job kind: give it to "
                                         r"@job\(\.\.\.\), not per call"):
        jobs.add.using(timeout=5)
    with pytest.raises(TypeError, match="soft_timeout is a time limit of the job kind"):
        jobs.Overrun.using(soft_timeout=1).enqueue({})  # type: ignore[attr-defined]
    assert r.keys("ql:j:*") == []  # nothing was sent


def test_the_worker_enforces_a_kinds_limits_over_its_timeout(redis_url, tmp_path):
    tidy = jobs.tidy_up.enqueue(1000)
    overrun = jobs.Overrun.enqueue({})  # type: ignore[attr-defined]
    result = manage(redis_url, "qless_worker", "limits", "--processes", "1", "--timeout", "60",
                    "--kill-grace", "1", "--max-jobs", "2",
                    QLESS_TEST_DB=str(tmp_path / "db.sqlite3"))
    assert result.returncode == 0, result.stderr
    assert tidy.result().startswith("stopped cleanly after ")
    failure = get_client().jobs[overrun.jid].failure
    assert failure["group"] == "django_qless.JobTimeout"
    assert "time limit of 1s" in failure["message"]
