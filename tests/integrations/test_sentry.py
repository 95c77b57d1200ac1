"""Sentry: failed jobs become events with the job's tags, context and breadcrumbs; each job is
a span continuing the trace of its put. Real sentry-sdk, an in-memory transport."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sentry_sdk

from django_qless.core.client import Client
from django_qless.core.integrations import TRACE_KEY
from django_qless.core.integrations.sentry import QlessIntegration
from tests.integrations import jobs  # noqa: F401 - registers the jobs
from tests.integrations.support import (
    DSN,
    MemoryTransport,
    read_json_lines,
    request_span,
    spans_of,
)

pytestmark = pytest.mark.timeout(60)

BOOM = "tests.integrations.jobs.boom"
OK = "tests.integrations.jobs.ok"
FLAKY = "tests.integrations.jobs.flaky"
SLOW = "tests.integrations.jobs.slow"


def test_a_failing_job_is_an_event_with_its_tags_context_and_own_breadcrumbs(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init()
    queue = qless_client.queues["obs"]
    first = queue.put(OK, {"n": 1})
    jid = queue.put(BOOM, {"n": 7, "api_token": "s3cret", "nested": {"password": "pw"}},
                    retries=3)
    run_worker("obs", max_jobs=2)

    assert qless_client.jobs[jid].state == "failed"
    [event] = transport.events()
    [exc] = event["exception"]["values"]
    assert (exc["type"], exc["value"]) == ("ValueError", "boom 7")
    assert (exc["mechanism"]["type"], exc["mechanism"]["handled"]) == ("qless", False)
    tags = event["tags"]
    assert tags["qless.jid"] == jid and tags["qless.queue"] == "obs"
    assert tags["qless.klass"] == BOOM
    assert (tags["qless.attempt"], tags["qless.retries_left"]) == ("1", "3")
    assert tags["qless.outcome"] == "failed"
    context = event["contexts"]["qless_job"]
    assert context["jid"] == jid and context["worker"] == "obs-worker"
    # The data goes along, its secrets filtered and the trace headers left out.
    assert context["data"] == {"n": 7, "api_token": "[Filtered]",
                               "nested": {"password": "[Filtered]"}}
    # The failing job's own log line is a breadcrumb; the job before it left none here.
    crumbs = [c["message"] for c in event["breadcrumbs"]["values"]]
    assert crumbs == [f"about to fail job {jid}"]
    assert first not in str(event["breadcrumbs"])


def test_big_job_data_is_cut_to_the_configured_size(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init(max_data_bytes=200)
    qless_client.queues["obs"].put(BOOM, {"n": 1, "blob": "x" * 5000})
    run_worker("obs")
    data = transport.events()[0]["contexts"]["qless_job"]["data"]
    assert data["truncated"] is True and data["bytes"] > 5000
    assert len(data["json_start"]) <= 200


def test_job_data_can_be_left_out(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init(send_job_data=False)
    qless_client.queues["obs"].put(BOOM, {"n": 1})
    run_worker("obs")
    assert "data" not in transport.events()[0]["contexts"]["qless_job"]


def test_every_failed_attempt_is_an_event_tagged_with_its_attempt(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init()
    jid = qless_client.queues["obs"].put(FLAKY, {}, retries=2)
    run_worker("obs", max_jobs=3)

    assert qless_client.jobs[jid].state == "failed"
    events = transport.events()
    assert [(e["tags"]["qless.attempt"], e["tags"]["qless.retries_left"],
             e["tags"]["qless.outcome"]) for e in events] == [
        ("1", "2", "retried"), ("2", "1", "retried"), ("3", "0", "failed")]
    # The job said "retry scheduled" from the real error: the real error is reported.
    assert [e["exception"]["values"][-1]["value"] for e in events] == [
        "flaky attempt 1", "flaky attempt 2", "flaky attempt 3"]


def test_only_the_final_failure_when_configured(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init(only_final_failure=True)
    qless_client.queues["obs"].put(FLAKY, {}, retries=2)
    run_worker("obs", max_jobs=3)
    [event] = transport.events()
    assert (event["tags"]["qless.attempt"], event["tags"]["qless.outcome"]) == ("3", "failed")


def test_each_job_is_a_span_continuing_the_trace_of_its_put(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init()
    with request_span("POST /orders") as request:
        ok = qless_client.queues["obs"].put(OK, {})
        bad = qless_client.queues["obs"].put(BOOM, {"n": 2})
    run_worker("obs", max_jobs=2)
    sentry_sdk.flush()

    spans = transport.spans()
    by_op: dict[str, list[dict]] = {}
    for span in spans:
        by_op.setdefault(span["attributes"].get("sentry.op", ""), []).append(span)
    publish = {s["attributes"]["messaging.message.id"]: s for s in by_op["queue.publish"]}
    process = {s["attributes"]["messaging.message.id"]: s for s in by_op["queue.process"]}
    assert set(publish) == set(process) == {ok, bad}
    for jid in (ok, bad):
        assert publish[jid]["parent_span_id"] == request.span_id
        assert process[jid]["trace_id"] == request.trace_id
        assert process[jid]["parent_span_id"] == publish[jid]["span_id"]
        attrs = process[jid]["attributes"]
        assert attrs["messaging.system"] == "qless"
        assert attrs["messaging.destination.name"] == "obs"
        assert attrs["sentry.segment.name.source"] == "task"
    assert process[ok]["name"] == OK and process[ok]["status"] == "ok"
    assert process[bad]["status"] == "error"
    assert process[bad]["attributes"]["qless.outcome"] == "failed"
    # The error event belongs to the same trace.
    [event] = transport.events()
    assert event["contexts"]["trace"]["trace_id"] == request.trace_id


def test_the_put_sends_the_trace_headers_in_the_job_data(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
) -> None:
    sentry_init()
    with request_span("request") as request:
        jid = qless_client.queues["obs"].put(OK, {"n": 1})
    data = qless_client.jobs[jid].data
    assert data["n"] == 1
    assert data[TRACE_KEY]["sentry-trace"].startswith(request.trace_id)
    assert "sentry-trace_id=" in data[TRACE_KEY]["baggage"]


def test_the_worker_log_line_about_a_reported_failure_is_not_a_second_event(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    from sentry_sdk.integrations.logging import LoggingIntegration

    transport = sentry_init()
    # As an application that sends ERROR log records to Sentry as events would.
    sentry_sdk.init(dsn=DSN, transport=transport, auto_enabling_integrations=False,
                    integrations=[QlessIntegration(),
                                  LoggingIntegration(event_level=logging.ERROR)])
    jid = qless_client.queues["obs"].put(BOOM, {"n": 3})
    run_worker("obs")
    worker_log = logging.getLogger("django_qless.worker")
    worker_log.error("job %s failed", jid, extra={"jid": jid})
    worker_log.error("job %s failed", "another", extra={"jid": "another"})
    worker_log.error("job %s: could not be failed", jid, extra={"jid": jid})
    assert [(e.get("logger"), e.get("logentry", {}).get("message"))
            for e in transport.events()] == [
        (None, None), ("django_qless.worker", "job %s failed"),
        ("django_qless.worker", "job %s: could not be failed")]


def test_a_forking_worker_child_flushes_its_events_before_it_exits(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client, tmp_path: Path,
    cli_worker: Callable[..., int],
) -> None:
    sentry_init()
    with request_span("request") as request:
        jid = qless_client.queues["obs"].put(BOOM, {"n": 9})
    out = tmp_path / "sentry.jsonl"
    pid = cli_worker("-n", "1", "--max-jobs", "1", "obs", env={"TEST_SENTRY_OUT": out})
    assert qless_client.jobs[jid].state == "failed"
    # The child's transport keeps envelopes in memory until a flush writes them out.
    items = read_json_lines(out)
    events = [i for i in items if i["type"] == "event"]
    assert [e["payload"]["tags"]["qless.jid"] for e in events] == [jid]
    assert events[0]["pid"] != pid  # sent by the child, not the supervisor
    assert events[0]["payload"]["contexts"]["trace"]["trace_id"] == request.trace_id
    spans = spans_of([(i["type"], i["payload"]) for i in items])
    assert [s["attributes"]["messaging.message.id"] for s in spans
            if s["attributes"].get("sentry.op") == "queue.process"] == [jid]


def test_without_the_integration_enabled_jobs_run_untouched(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init()
    # A client without QlessIntegration.
    sentry_sdk.init(dsn=DSN, transport=transport, auto_enabling_integrations=False)
    jid = qless_client.queues["obs"].put(BOOM, {"n": 1})
    run_worker("obs")
    assert TRACE_KEY not in qless_client.jobs[jid].data
    assert transport.events() == []


def test_a_job_stopped_at_its_time_limit_is_reported(
    qless_client: Client, tmp_path: Path, cli_worker: Callable[..., int],
) -> None:
    jid = qless_client.queues["obs"].put(SLOW, {})
    out = tmp_path / "sentry.jsonl"
    cli_worker("-n", "0", "--timeout", "1", "--max-jobs", "1", "obs",
               env={"TEST_SENTRY_OUT": out})
    assert qless_client.jobs[jid].state == "failed"
    [event] = [i["payload"] for i in read_json_lines(out) if i["type"] == "event"]
    assert event["tags"]["qless.outcome"] == "timed_out"
    assert event["tags"]["qless.jid"] == jid
    # The stack shows where the job was when it was stopped.
    frames = event["exception"]["values"][-1]["stacktrace"]["frames"]
    assert "slow" in [f["function"] for f in frames]


def test_a_traces_sampler_sees_the_job(
    sentry_init: Callable[..., MemoryTransport], qless_client: Client,
    run_worker: Callable[..., None],
) -> None:
    transport = sentry_init()
    seen: list[Any] = []

    def sampler(context: dict[str, Any]) -> float:
        job = context.get("qless_job")
        if job is not None:
            seen.append((job.jid, job.queue, job.attempt))
            return 0.0  # not this queue's jobs
        return 1.0

    sentry_sdk.init(dsn=DSN, transport=transport, traces_sampler=sampler,
                    auto_enabling_integrations=False, integrations=[QlessIntegration()])
    jid = qless_client.queues["obs"].put(OK, {})
    run_worker("obs")
    sentry_sdk.flush()
    assert seen == [(jid, "obs", 1)]
    assert not [s for s in transport.spans() if s["attributes"].get("sentry.op") == "queue.process"]
