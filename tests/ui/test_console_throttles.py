"""Throttles page lists every throttle; no-op deletes and pauses say nothing changed."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tests.ui.test_actions import texts, url


def test_named_throttles_are_listed_with_counts(mc: Client, qc: Any) -> None:
    qc.throttles["api"].set(1, ttl=300)
    qc.queues["q"].set_throttle(2)
    qc.queues["q"].put("tests.Job", {}, jid="h1", throttles=["api", "free"], priority=9)
    qc.queues["q"].put("tests.Job", {}, jid="h2", throttles=["api"])
    qc.queues["q"].pop(2)
    body = mc.get(url("throttles")).content.decode()
    row = body[body.index('data-throttle="api"'):]
    row = row[:row.index("</tr>")]
    assert "<td>1</td><td>1</td>" in row  # one running, one pending
    assert 'data-throttle="free"' in body and "not defined" in body
    assert 'data-throttle="ql:q:q"' in body and 'href="/qless/queues/q/"' in body


def test_deleting_a_missing_throttle_says_it_did_not_exist(mc: Client, qc: Any) -> None:
    response = mc.post(url("throttle_delete", "nonexistent"))
    assert response.status_code == 302
    assert texts(response)[-1] == "Throttle nonexistent did not exist: nothing was deleted."
    qc.throttles["real"].set(3)
    response = mc.post(url("throttle_delete", "real"))
    assert texts(response)[-1] == "Deleted throttle real."
    assert not qc.throttles.get_many(["real"])[0].defined


def test_pausing_twice_says_nothing_changed(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    def say(action: str) -> str:
        return texts(mc.post(url(action, "q")))[-1]

    assert say("queue_pause") == "Paused queue q."
    assert say("queue_pause") == "Queue q is already paused: nothing changed."
    assert say("queue_unpause") == "Unpaused queue q."
    assert say("queue_unpause") == "Queue q is not paused: nothing changed."
