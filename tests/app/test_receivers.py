"""The optional receivers: mail_admins on failure, webhook POST for tracked jobs."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.conf import settings
from django.core import mail
from django.test import override_settings

from django_qless.bridge import Bridge
from django_qless.testing import run_queued
from tests.app import jobs

pytestmark = pytest.mark.django_db(transaction=True)


def wait_until(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.fixture
def hook_server():
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            received.append(json.loads(body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", received
    server.shutdown()
    server.server_close()


def test_mail_admins_on_failure_only_when_switched_on():
    from django_qless import signals

    mail.outbox.clear()
    failed: list[str] = []

    def seen(sender, event, **kwargs):
        failed.append(event.jid)

    signals.job_failed.connect(seen)
    try:
        with Bridge("default"):
            off = jobs.boom.enqueue("off")
            run_queued()
            wait_until(lambda: off.jid in failed)  # the receiver ran with the switch off
            assert mail.outbox == []
            with override_settings(QLESS={**settings.QLESS,
                                          "RECEIVERS": {"MAIL_ADMINS_ON_FAILURE": True}}):
                bad = jobs.boom.enqueue("mail me")
                run_queued()
                wait_until(lambda: len(mail.outbox) == 1)
    finally:
        signals.job_failed.disconnect(seen)
    message = mail.outbox[0]
    assert bad.jid in message.subject and "builtins.ValueError" in message.subject
    assert message.to == ["ops@example.com"] and "mail me" in message.body


def test_webhook_posts_events_of_tracked_jobs_only(hook_server):
    url, received = hook_server
    receivers = {"WEBHOOK_URL": url, "WEBHOOK_EVENTS": ["completed", "failed"]}
    with override_settings(QLESS={**settings.QLESS, "RECEIVERS": receivers}):
        with Bridge("default"):
            tracked = jobs.add.using(track=True, tags=["t"]).enqueue(1)
            untracked = jobs.add.enqueue(2)
            failed = jobs.boom.using(track=True).enqueue()
            run_queued()
            wait_until(lambda: len(received) >= 2)
            time.sleep(0.3)
    by_jid = {body["jid"]: body for body in received}
    assert set(by_jid) == {tracked.jid, failed.jid} and untracked.jid not in by_jid
    assert by_jid[tracked.jid]["event"] == "completed"
    assert by_jid[tracked.jid]["job"]["tags"] == ["t"]
    assert by_jid[failed.jid]["event"] == "failed"
    assert by_jid[failed.jid]["payload"]["group"] == "builtins.ValueError"


def test_webhook_failure_is_logged_not_raised(caplog):
    receivers = {"WEBHOOK_URL": "http://127.0.0.1:9/unreachable", "WEBHOOK_TIMEOUT": 1}
    with override_settings(QLESS={**settings.QLESS, "RECEIVERS": receivers}):
        with Bridge("default"):
            jobs.add.using(track=True).enqueue(1)
            run_queued()
            wait_until(lambda: any("webhook POST" in r.getMessage() for r in caplog.records))
