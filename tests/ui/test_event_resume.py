"""The event stream resumes from Last-Event-ID: events published between two responses are
replayed from the process's buffer; an id it cannot replay from yields a gap event."""

from __future__ import annotations

import json
import time
from typing import Any

from django.test import Client

from tests.ui.test_actions import url


def read_until(chunks: Any, needle: str) -> str:
    got = ""
    for chunk in chunks:
        got += chunk.decode()
        if needle in got:
            return got
    raise AssertionError(f"{needle!r} never came: {got!r}")


def events_of(text: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if fields.get("event") == "qless":
            out.append((fields["id"], json.loads(fields["data"])))
    return out


def test_reconnect_replays_the_events_published_in_between(mc: Client, qc: Any) -> None:
    first = mc.get(url("api_events"))
    chunks = iter(first.streaming_content)
    assert next(chunks) == b"retry: 2000\n\n"
    jid = qc.queues["q"].put("tests.Job", {})
    last_id, payload = events_of(read_until(chunks, jid + '"'))[-1]
    assert payload["jid"] == jid
    first.close()  # the browser is between two responses now
    missed = [qc.queues["q"].put("tests.Job", {}) for _ in range(5)]
    second = mc.get(url("api_events"), HTTP_LAST_EVENT_ID=last_id)
    text = read_until(iter(second.streaming_content), missed[-1] + '"')
    got = [p["jid"] for _, p in events_of(text)]
    assert got == missed  # all of them, in order, none twice
    assert "event: gap" not in text
    second.close()


def test_an_event_published_right_after_the_first_line_is_sent(mc: Client, qc: Any) -> None:
    response = mc.get(url("api_events"))
    chunks = iter(response.streaming_content)
    assert next(chunks) == b"retry: 2000\n\n"
    jid = qc.queues["q"].put("tests.Job", {})
    time.sleep(1.5)  # the buffer has it before the stream reads on
    assert [p["jid"] for _, p in events_of(read_until(chunks, jid + '"'))] == [jid]
    response.close()


def test_an_id_the_buffer_does_not_know_is_a_gap(mc: Client, qc: Any) -> None:
    response = mc.get(url("api_events"), HTTP_LAST_EVENT_ID="0badc0de-12")
    chunks = iter(response.streaming_content)
    assert next(chunks) == b"retry: 2000\n\n"
    assert next(chunks).startswith(b"event: gap\ndata: ")
    response.close()
    response = mc.get(url("api_events"), HTTP_LAST_EVENT_ID="<script>")
    chunks = iter(response.streaming_content)
    next(chunks)
    assert next(chunks).startswith(b"event: gap\n")
    response.close()
