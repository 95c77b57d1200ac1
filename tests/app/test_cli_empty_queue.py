"""`manage.py qless empty-queue`: counts without --yes, then batches until empty."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from django_qless.clients import get_client

pytestmark = pytest.mark.django_db(transaction=True)


def qless(*args: str) -> object:
    out = StringIO()
    call_command("qless", *args, "--json", stdout=out, stderr=StringIO())
    return json.loads(out.getvalue())


def test_empty_queue_asks_for_yes_then_empties_and_deletes() -> None:
    client = get_client()
    queue = client.queues["doomed"]
    for _ in range(3):
        queue.put("tests.app.jobs.add", {})
    queue.recur("tests.app.jobs.add", {}, 3600, offset=3600)
    client.queues["kept"].put("tests.app.jobs.add", {})
    with pytest.raises(CommandError, match="add --yes"):
        qless("empty-queue", "doomed")
    assert queue.length == 3
    reply = qless("empty-queue", "doomed", "--delete", "--yes")
    assert reply == {"removed": {"waiting": 3, "recurring": 1}, "kept": {}, "deleted": True}
    assert "doomed" not in client.queues.names() and queue.length == 0
    assert client.queues["kept"].length == 1
