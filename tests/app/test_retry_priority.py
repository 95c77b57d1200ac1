"""``@job(retry_on=..., retry_priority=...)``: a retried job waits at another priority."""

from __future__ import annotations

import pytest

from django_qless import job
from django_qless.core import InvalidArgument
from django_qless.decorators import Backoff
from django_qless.testing import run_queued

pytestmark = pytest.mark.django_db(transaction=True)


class Busy(Exception):
    """The partner is busy: try again later, behind fresher work."""


@job(queue="prio", priority=10, retries=3, retry_on=[Busy], backoff=Backoff.fixed(0),
     retry_priority=-5)
def busy_fixed() -> None:
    """Always busy; each retry waits at priority -5."""
    raise Busy("busy")


@job(queue="prio", priority=10, retries=3, retry_on=Busy, backoff=Backoff.fixed(0),
     retry_priority=lambda priority, attempt: priority - 10 * attempt)
def busy_sliding() -> None:
    """Always busy; each retry sinks a little further."""
    raise Busy("busy")


@job(queue="prio", priority=10, retries=3, retry_on=Busy, backoff=Backoff.fixed(0))
def busy_plain() -> None:
    """Always busy; retries keep the priority."""
    raise Busy("busy")


def test_a_fixed_retry_priority_applies_to_the_retried_job():
    handle = busy_fixed.enqueue()
    [outcome] = run_queued(["prio"], max_jobs=1)
    assert outcome.outcome == "retried"
    job_now = handle.get()
    assert (job_now.state, job_now.priority) == ("waiting", -5)


def test_a_callable_gets_the_current_priority_and_the_attempt():
    handle = busy_sliding.enqueue()
    run_queued(["prio"], max_jobs=1)
    assert handle.get().priority == 0         # 10 - 10 * 1
    run_queued(["prio"], max_jobs=1)
    assert handle.get().priority == -20       # 0 - 10 * 2


def test_a_retried_job_goes_behind_fresher_work_of_higher_priority():
    first = busy_fixed.enqueue()
    run_queued(["prio"], max_jobs=1)           # retried at -5
    fresh = busy_plain.enqueue()               # priority 10
    outcomes = run_queued(["prio"], max_jobs=1)
    assert [o.jid for o in outcomes] == [fresh.jid] and first.state() == "waiting"


def test_without_retry_priority_the_priority_is_kept():
    handle = busy_plain.enqueue()
    run_queued(["prio"], max_jobs=1)
    assert handle.get().priority == 10


def test_retry_priority_is_checked_at_decoration():
    with pytest.raises(InvalidArgument, match="retry_priority"):
        job(retry_on=Busy, retry_priority=2**40)(busy_plain.func)
    with pytest.raises(TypeError, match="retry_priority needs retry_on"):
        job(retry_priority=1)(busy_plain.func)


@job(queue="prio", retry_on=Busy, retry_priority=lambda priority, attempt: "high")
def bad_callable() -> None:
    """Always busy, with a retry_priority callable that returns garbage."""
    raise Busy("busy")


def test_a_callable_returning_a_bad_priority_fails_the_job_clearly():
    handle = bad_callable.enqueue()
    [outcome] = run_queued(["prio"], max_jobs=1)
    assert outcome.outcome == "failed" and "retry_priority() result" in str(outcome.error)
    assert handle.state() == "failed"


def test_qless_retry_requeues_failed_jobs_at_a_priority():
    from io import StringIO

    from django.core.management import CommandError, call_command

    handle = busy_plain.using(retries=0).enqueue()
    run_queued(["prio"], max_jobs=1)
    assert handle.state() == "failed"
    with pytest.raises(CommandError, match=r"priority must be an integer in"):
        call_command("qless", "retry", handle.jid, "--priority", str(2**40), stdout=StringIO())
    assert handle.state() == "failed"
    call_command("qless", "retry", handle.jid, "--priority", "42", stdout=StringIO())
    assert (handle.state(), handle.get().priority) == ("waiting", 42)
