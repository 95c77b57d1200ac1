"""Django: a `django.tasks` task enqueued in a traced request fails in `manage.py
qless_worker` (serial and forking) with Sentry set up in settings: the event names the task
and belongs to the request's trace."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.app.helpers import ROOT, command_env
from tests.integrations import tasks
from tests.integrations.support import MemoryTransport, read_json_lines, request_span

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(autouse=True)
def qless_settings(redis_url: str) -> Iterator[str]:
    """Use the flushed test database as the default alias (and forget cached clients)."""
    from django.test import override_settings

    from django_qless.clients import clients

    with override_settings(QLESS={"default": {"URL": redis_url}}):
        yield redis_url
    clients.close_all()


@pytest.mark.parametrize("processes", ["0", "1"])
def test_a_failing_task_reaches_sentry_from_the_django_worker(
    sentry_init: Callable[..., MemoryTransport], redis_url: str, tmp_path: Path,
    processes: str,
) -> None:
    sentry_init()
    with request_span("POST /pay") as request:
        result = tasks.charge.enqueue(41)
    out = tmp_path / "sentry.jsonl"
    env = command_env(redis_url, TEST_SENTRY_OUT=str(out), QLESS_TEST_DB=str(tmp_path / "db"))
    env["DJANGO_SETTINGS_MODULE"] = "tests.integrations.django_settings"
    run = subprocess.run([sys.executable, "-m", "django", "qless_worker", "default",
                          "--processes", processes, "--max-jobs", "1"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    events = [i["payload"] for i in read_json_lines(out) if i["type"] == "event"]
    [event] = events
    assert event["tags"]["qless.jid"] == result.id
    assert event["tags"]["qless.klass"] == "tests.integrations.tasks.charge"
    assert event["exception"]["values"][-1]["value"] == "card declined for order 41"
    # The task's own log line (django.tasks logs its outcome after it).
    assert [c["message"] for c in event["breadcrumbs"]["values"]][0] == "charging order 41"
    assert event["contexts"]["trace"]["trace_id"] == request.trace_id
    assert event["contexts"]["qless_job"]["data"]["args"] == [41]


def test_an_enqueue_in_a_traced_request_is_a_producer_span_under_it(otel: Any) -> None:
    exporter, tracer = otel
    with tracer.start_as_current_span("GET /ship") as request:
        handle = tasks.ship.enqueue(7)
    by_name = {s.name: s for s in exporter.get_finished_spans()}
    send = by_name["send obs"]
    assert send.parent is not None
    assert send.parent.span_id == request.get_span_context().span_id
    assert send.attributes["messaging.message.id"] == handle.jid
    from django_qless.clients import get_client
    from django_qless.core.integrations import TRACE_KEY

    data = get_client().jobs[handle.jid].data
    assert data["args"] == [7]
    assert format(send.context.span_id, "016x") in data[TRACE_KEY]["traceparent"]
