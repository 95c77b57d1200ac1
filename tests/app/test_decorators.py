"""@job: registration, argument binding and JSON checks, options, classes, return values."""

from __future__ import annotations

import datetime
import decimal
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from django_qless import enqueue, job
from django_qless.core.registry import default_registry
from django_qless.decorators import JobFunction
from django_qless.options import JobFailedError, ResultNotReady
from django_qless.testing import run_queued
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def test_bare_and_called_decorators_register_functions_and_classes():
    assert isinstance(jobs.add, JobFunction)
    assert jobs.add.options.queue == "default"
    assert jobs.send_mail.options.queue == "emails" and jobs.send_mail.options.priority == 10
    for name in ("tests.app.jobs.add", "tests.app.jobs.send_mail", "tests.app.jobs.Thumbnail"):
        assert name in default_registry
    assert jobs.add(2, b=3) == 5  # a plain call runs the function
    assert jobs.add.__name__ == "add" and jobs.add.__doc__ == "Return a + b."


def test_enqueue_puts_a_job_with_the_decorator_options(r):
    handle = jobs.send_mail.enqueue("a@example.com", subject="x")
    assert handle.status == "enqueued" and len(handle.jid) == 32
    found = handle.get()
    assert found.klass_name == "tests.app.jobs.send_mail" and found.queue_name == "emails"
    assert found.priority == 10 and found.tags == ("mail",) and found.original_retries == 3
    assert found.data == {"args": ["a@example.com"], "kwargs": {"subject": "x"}}


@pytest.mark.parametrize(("call", "needle"), [
    (lambda: jobs.add.enqueue(), "missing a required argument: 'a'"),
    (lambda: jobs.add.enqueue(1, 2, 3), "too many positional arguments"),
    (lambda: jobs.add.enqueue(1, c=2), "unexpected keyword argument 'c'"),
    # (a required argument left out too: the misspelt name is what the user needs to hear)
    (lambda: jobs.async_add.enqueue(1, c=2), r"async_add\(\): got an unexpected keyword "
                                             r"argument 'c'$"),
    (lambda: jobs.send_mail.enqueue("x", "subject"), "too many positional arguments"),
])
def test_arguments_are_bound_against_the_signature(call, needle, r):
    with pytest.raises(TypeError, match=needle) as info:
        call()
    assert str(info.value).startswith("tests.app.jobs.")
    assert r.keys("ql:j:*") == []


def test_arguments_must_be_json_and_the_error_names_the_argument(r):
    with pytest.raises(TypeError, match=r"argument 'b' is not JSON-serialisable.*primary key"):
        jobs.add.enqueue(1, b=object())
    with pytest.raises(TypeError, match=r"argument 'a' is not JSON-serialisable"):
        jobs.add.enqueue(float("nan"))
    with pytest.raises(TypeError, match=r"argument 'value'"):
        jobs.echo.enqueue({"x": {1, 2}})
    assert r.keys("ql:j:*") == []


def test_django_json_types_are_allowed_and_arrive_as_strings():
    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    handle = jobs.kinds.enqueue(when, decimal.Decimal("1.50"))
    assert handle.get().data["args"] == ["2026-01-02T03:04:05Z", "1.50"]
    run_queued()
    assert handle.result() == ["str", "str", "2026-01-02T03:04:05Z", "1.50"]
    assert jobs.echo.enqueue(uuid.UUID(int=1)).get().data["args"] == [str(uuid.UUID(int=1))]


def test_using_overrides_options_without_changing_the_original():
    dep = jobs.add.enqueue(1)
    handle = jobs.add.using(queue="other", priority=-5, tags=["t"], retries=1,
                            depends=[dep.jid], jid="my-jid").enqueue(2)
    found = handle.get()
    assert (handle.jid, found.queue_name, found.priority, found.tags) == (
        "my-jid", "other", -5, ("t",))
    assert found.state == "depends" and found.dependencies == [dep.jid]
    assert jobs.add.options.queue == "default" and jobs.add.options.priority == 0
    with pytest.raises(TypeError, match="unknown job option"):
        jobs.add.using(colour="red")
    with pytest.raises(TypeError, match="tags must be a list"):
        jobs.add.using(tags="oops")


def test_enqueue_in_and_at_schedule_the_job():
    handle = jobs.add.enqueue_in(timedelta(minutes=5), 1)
    assert handle.state() == "scheduled"
    later = timezone.now() + timedelta(hours=1)
    job2 = jobs.add.enqueue_at(later, 2).get()
    assert job2.state == "scheduled"
    assert run_queued() == []  # nothing is due yet
    past = jobs.add.enqueue_at(timezone.now() - timedelta(hours=1), 3)
    assert past.state() == "waiting"


def test_recur_uses_a_stable_jid_so_repeated_calls_do_not_duplicate(r):
    first = jobs.add.recur(3600, 1, b=1)
    second = jobs.add.recur(timedelta(hours=1), 1, b=1)
    assert first.jid == second.jid and first.status == "recurring"
    assert len(r.keys("ql:r:*")) == 1
    recurring = first.client.jobs.recurring(first.jid)
    assert recurring.interval == 3600 and recurring.klass_name == "tests.app.jobs.add"


def test_return_values_are_stored_and_failures_raise():
    ok = jobs.add.enqueue(20, b=22)
    bad = jobs.boom.enqueue("kaput")
    with pytest.raises(ResultNotReady, match="waiting"):
        ok.result()
    outcomes = {o.jid: o.outcome for o in run_queued()}
    assert outcomes == {ok.jid: "completed", bad.jid: "failed"}
    assert ok.result() == 42 and ok.get().data["result"] == 42
    with pytest.raises(JobFailedError, match="builtins.ValueError") as info:
        bad.result()
    assert "kaput" in info.value.failure["message"]


def test_async_functions_run():
    handle = jobs.async_add.enqueue(2, 3)
    run_queued()
    assert handle.result() == 5


def test_classes_get_enqueue_default_job_options_and_queue_methods():
    handle = jobs.Thumbnail.enqueue({"width": 7})
    found = handle.get()
    assert found.queue_name == "classes" and found.priority == 3
    assert found.tags == ("thumb", "w7")  # from default_job_options(data)
    other = jobs.Thumbnail.using(queue="default", tags=["explicit"]).enqueue({"width": 2})
    assert other.get().tags == ("explicit",)  # using() wins over default_job_options
    run_queued(["classes", "default"])
    assert handle.get().data["via"] == "queue method"  # the method named after the queue
    assert other.get().data["size"] == 4  # process(job) elsewhere
    with pytest.raises(TypeError, match="not JSON-serialisable"):
        jobs.Thumbnail.enqueue({"when": object()})


def test_enqueue_shortcut():
    assert enqueue(jobs.add, 1, b=1).get().data == {"args": [1], "kwargs": {"b": 1}}
    assert enqueue(jobs.Thumbnail, {"width": 1}).get().klass_name == "tests.app.jobs.Thumbnail"
    with pytest.raises(TypeError, match="needs a @job"):
        enqueue(print, 1)


def test_decorator_refuses_nested_functions_and_bad_options():
    def inner() -> None: ...

    with pytest.raises(TypeError, match="module-level function"):
        job(inner)
    with pytest.raises(TypeError, match="retry_on must name exception classes"):
        job(retry_on=["ValueError"])
    with pytest.raises(TypeError, match="backoff needs retry_on"):
        job(backoff=5)
    with pytest.raises(ValueError, match="unique must be one of"):
        job(unique="sometimes")


def test_track_option_tracks_the_job():
    handle = jobs.add.using(track=True).enqueue(1)
    assert handle.get().tracked is True


def test_throttles_option_limits_concurrency():
    client = jobs.add.enqueue(0).client
    client.throttles["one-at-a-time"].set(1)
    limited = jobs.add.using(throttles=["one-at-a-time"])
    first, second = limited.enqueue(1), limited.enqueue(2)
    assert first.get().throttles == ("one-at-a-time",)
    popped = client.queues["default"].pop(3)
    assert {j.jid for j in popped} >= {first.jid} and second.jid not in {j.jid for j in popped}
    assert second.state() == "throttled"



def test_aenqueue_from_async_code():
    import asyncio

    handle = asyncio.run(jobs.add.aenqueue(4, b=5))
    assert handle.status == "enqueued" and handle.get().data["args"] == [4]
