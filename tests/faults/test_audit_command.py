"""`manage.py qless_audit`: report, --json, --fix, exit code 1 while violations remain."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.test import override_settings

from django_qless.clients import clients

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


@pytest.fixture
def alias(tcp_redis):
    with override_settings(QLESS={"default": {"URL": tcp_redis.url},
                                  "other": {"URL": tcp_redis.url.replace("/0", "/1")}}):
        yield
    clients.close_all()


def run(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("qless_audit", *args, stdout=out)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    return code, out.getvalue()


def test_qless_audit_command(alias, qless_client, rconn):
    qless_client.queues["q"].put("K", {}, jid="real")
    assert run() == (0, run()[1]) and "0 violations" in run()[1]
    rconn.zadd("ql:q:q-work", {"ghost": 1})
    code, text = run("--json")
    data = json.loads(text)
    assert code == 1 and data["ok"] is False
    assert data["by_invariant"] == {"index.ghost": 1}
    # Another alias (db 1) is clean: --alias picks the client.
    assert run("--alias", "other")[0] == 0
    code, text = run("--fix")
    assert code == 0 and "dropped ghost from ql:q:q-work" in text
    assert rconn.zscore("ql:q:q-work", "real") is not None
    assert run()[0] == 0
