"""OpenTelemetry: a put is a PRODUCER span whose context travels with the job; the run is a
CONSUMER span under it (one trace), failures and retries recorded. Real SDK, in-memory
exporter (a file for a forking worker's child)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.integrations import TRACE_KEY
from tests.integrations import jobs  # noqa: F401 - registers the jobs
from tests.integrations.support import read_json_lines, span_record

pytestmark = pytest.mark.timeout(60)

BOOM = "tests.integrations.jobs.boom"
OK = "tests.integrations.jobs.ok"
FLAKY = "tests.integrations.jobs.flaky"
SLOW = "tests.integrations.jobs.slow"
ROOT = Path(__file__).resolve().parents[2]


def finished(exporter: Any) -> dict[str, list[dict[str, Any]]]:
    """Return the finished spans by name."""
    spans: dict[str, list[dict[str, Any]]] = {}
    for span in exporter.get_finished_spans():
        record = span_record(span)
        spans.setdefault(record["name"], []).append(record)
    return spans


def test_request_enqueue_and_run_are_one_trace(
    otel: Any, qless_client: Client, run_worker: Callable[..., None],
) -> None:
    exporter, tracer = otel
    with tracer.start_as_current_span("GET /checkout"):
        jid = qless_client.queues["obs"].put(OK, {"n": 1})
    assert "traceparent" in qless_client.jobs[jid].data[TRACE_KEY]
    run_worker("obs")

    spans = finished(exporter)
    [request], [send], [process] = spans["GET /checkout"], spans["send obs"], spans["process obs"]
    assert send["kind"] == "PRODUCER" and process["kind"] == "CONSUMER"
    assert send["trace_id"] == process["trace_id"] == request["trace_id"]
    assert send["parent_id"] == request["span_id"]
    assert process["parent_id"] == send["span_id"]
    assert process["links"] == [send["span_id"]]
    assert send["attributes"] == {
        "messaging.system": "qless", "messaging.destination.name": "obs",
        "messaging.operation.name": "send", "messaging.operation.type": "send",
        "messaging.message.id": jid, "qless.job.klass": OK,
    }
    attrs = process["attributes"]
    assert attrs["messaging.system"] == "qless"
    assert attrs["messaging.destination.name"] == "obs"
    assert attrs["messaging.operation.name"] == "process"
    assert attrs["messaging.operation.type"] == "process"
    assert attrs["messaging.message.id"] == jid
    assert attrs["messaging.client.id"] == "obs-worker"
    assert (attrs["qless.job.attempt"], attrs["qless.job.outcome"]) == (1, "completed")
    assert process["status"] == "UNSET"


def test_a_put_outside_any_span_starts_the_trace(
    otel: Any, qless_client: Client, run_worker: Callable[..., None],
) -> None:
    exporter, _ = otel
    qless_client.queues["obs"].put(OK, {})
    run_worker("obs")
    spans = finished(exporter)
    [send], [process] = spans["send obs"], spans["process obs"]
    assert send["parent_id"] is None and process["parent_id"] == send["span_id"]


def test_a_failure_is_recorded_on_the_span(
    otel: Any, qless_client: Client, run_worker: Callable[..., None],
) -> None:
    exporter, _ = otel
    qless_client.queues["obs"].put(BOOM, {"n": 4})
    run_worker("obs")
    [process] = finished(exporter)["process obs"]
    assert process["status"] == "ERROR"
    assert process["attributes"]["error.type"] == "builtins.ValueError"
    assert process["attributes"]["qless.job.outcome"] == "failed"
    [event] = process["events"]
    assert event["name"] == "exception"
    assert event["attributes"]["exception.type"] == "ValueError"
    assert event["attributes"]["exception.message"] == "boom 4"


def test_retries_are_recorded_on_each_attempt(
    otel: Any, qless_client: Client, run_worker: Callable[..., None],
) -> None:
    exporter, _ = otel
    qless_client.queues["obs"].put(FLAKY, {}, retries=2)
    run_worker("obs", max_jobs=3)
    attempts = finished(exporter)["process obs"]
    assert [(a["attributes"]["qless.job.attempt"], a["attributes"]["qless.job.outcome"])
            for a in attempts] == [(1, "retried"), (2, "retried"), (3, "failed")]
    assert all(a["status"] == "ERROR" for a in attempts)
    assert [[e["name"] for e in a["events"]] for a in attempts] == [
        ["exception", "qless.job.retry"], ["exception", "qless.job.retry"], ["exception"]]
    assert attempts[0]["events"][1]["attributes"] == {"qless.job.attempt": 1,
                                                     "qless.job.retries_left": 1}
    # Every attempt continues the one trace of the put.
    [send] = finished(exporter)["send obs"]
    assert {a["parent_id"] for a in attempts} == {send["span_id"]}


def test_a_forking_worker_child_exports_its_spans_before_it_exits(
    otel: Any, qless_client: Client, tmp_path: Path, cli_worker: Callable[..., int],
) -> None:
    exporter, tracer = otel
    with tracer.start_as_current_span("request"):
        ok = qless_client.queues["obs"].put(OK, {})
        bad = qless_client.queues["obs"].put(BOOM, {"n": 5})
    sends = {s["attributes"]["messaging.message.id"]: s for s in finished(exporter)["send obs"]}
    out = tmp_path / "spans.jsonl"
    pid = cli_worker("-n", "1", "--max-jobs", "2", "obs", env={"TEST_OTEL_OUT": out})
    # The child's spans wait in a batch processor until the worker flushes it.
    spans = {s["attributes"]["messaging.message.id"]: s for s in read_json_lines(out)
             if s["name"] == "process obs"}
    assert set(spans) == {ok, bad}
    for jid, span in spans.items():
        assert span["pid"] != pid  # exported by the child
        assert span["trace_id"] == sends[jid]["trace_id"]
        assert span["parent_id"] == sends[jid]["span_id"]
    assert spans[ok]["status"] == "UNSET" and spans[bad]["status"] == "ERROR"


@pytest.mark.timeout(180)
def test_on_a_cluster_shard_the_context_travels_with_the_job(
    otel: Any, cluster: Any, run_worker: Callable[..., None],
) -> None:
    from django_qless.core.cluster.sharded import ShardedClient

    urls = [f"redis://{n.address}" for n in cluster.primaries()]
    sharded = ShardedClient(urls, shards=6)
    exporter, tracer = otel
    client = sharded.for_queue("obs")
    with tracer.start_as_current_span("request"):
        jid = client.queues["obs"].put(OK, {"n": 1})
    assert "traceparent" in client.jobs[jid].data[TRACE_KEY]
    run_worker("obs", connect=lambda: ShardedClient(urls, shards=6))
    assert client.jobs[jid].state == "complete"
    spans = finished(exporter)
    [request], [send], [process] = spans["request"], spans["send obs"], spans["process obs"]
    assert process["trace_id"] == request["trace_id"]
    assert process["parent_id"] == send["span_id"]
    sharded.close()


def test_without_opentelemetry_nothing_is_imported_or_traced(redis_url: str) -> None:
    script = f"""
import sys
sys.modules["opentelemetry"] = None  # as if opentelemetry-api were not installed
from django_qless.core.client import Client
from django_qless.core.integrations import TRACE_KEY
from django_qless.core.integrations.otel import QlessInstrumentor
assert QlessInstrumentor().instrument() is False
client = Client({redis_url!r}, worker_name="x")
jid = client.queues["obs"].put("k", {{"n": 1}})
assert client.jobs[jid].data == {{"n": 1}}, client.jobs[jid].data
import django_qless.core.workers
loaded = [m for m in sys.modules if m.startswith(("sentry_sdk", "opentelemetry"))
          and sys.modules[m] is not None]
assert not loaded, loaded
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_the_context_is_plain_json_in_the_job_data_any_client_reads(
    otel: Any, qless_client: Client, r: Any,
) -> None:
    _, tracer = otel
    with tracer.start_as_current_span("request") as request:
        jid = qless_client.queues["obs"].put(OK, {"n": 1})
    # What a stock qless client reads: the job hash's data field, a JSON object.
    data = json.loads(r.hget(f"ql:j:{jid}", "data"))
    trace_id = format(request.get_span_context().trace_id, "032x")
    assert data["n"] == 1
    assert data[TRACE_KEY]["traceparent"].split("-")[1] == trace_id


def test_a_job_stopped_at_its_time_limit_is_an_error_span(
    qless_client: Client, tmp_path: Path, cli_worker: Callable[..., int],
) -> None:
    qless_client.queues["obs"].put(SLOW, {})
    out = tmp_path / "spans.jsonl"
    cli_worker("-n", "0", "--timeout", "1", "--max-jobs", "1", "obs",
               env={"TEST_OTEL_OUT": out})
    [process] = [s for s in read_json_lines(out) if s["name"] == "process obs"]
    assert process["status"] == "ERROR"
    assert process["attributes"]["qless.job.outcome"] == "timed_out"
    assert [e["name"] for e in process["events"]] == ["exception"]


def test_opentelemetry_instrument_instruments_qless_by_itself() -> None:
    script = ("from django_qless.core import integrations; "
              "print([type(h).__name__ for h in integrations.installed_hooks()])")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "none", "OTEL_METRICS_EXPORTER": "none",
           "OTEL_LOGS_EXPORTER": "none"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "opentelemetry-instrument"), sys.executable, "-c",
         script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['_OtelHooks']"
