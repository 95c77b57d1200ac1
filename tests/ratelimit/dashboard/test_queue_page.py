"""The queue page shows a queue's rate limit and its use; its form sets and clears it, and
refuses bad input with a message on the page."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

pytestmark = pytest.mark.django_db

__all__: list[str] = []


def url(name: str, *args: str) -> str:
    return reverse(f"django_qless:{name}", args=args)


def last(response: Any) -> str:
    return [str(m) for m in get_messages(response.wsgi_request)][-1]


def test_the_queue_page_shows_the_limit_and_its_use(mc: Client, qc: Any) -> None:
    q = qc.queues["q"]
    q.put("tests.Job", {})
    assert "No rate limit" in mc.get(url("queue", "q")).content.decode()
    q.set_rate_limit("2/m", key="customer")
    for customer in ("a", "a", "a", "b"):
        q.put("tests.Job", {"customer": customer})
    q.pop(10)
    html = mc.get(url("queue", "q")).content.decode()
    assert "At most <strong>2/m</strong> per value of <code>customer</code>" in html
    assert "<strong>2</strong> of 2 started in the current window" in html
    assert "(the busiest of 3 keys)" in html
    assert "<strong>1</strong> job waiting for its window." in html


def test_the_form_sets_and_clears_the_limit(mc: Client, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    response = mc.post(url("queue_rate_limit", "q"), {"rate": "100/m", "key": ""})
    assert last(response) == "Queue q: rate limit 100/m."
    status = qc.queues["q"].rate_limit()
    assert status is not None and (status.limit, status.period, status.key) == (100, 60.0, "")
    assert last(mc.post(url("queue_rate_limit", "q"), {"rate": ""})) == \
        "Queue q: rate limit removed."
    assert qc.queues["q"].rate_limit() is None
    assert last(mc.post(url("queue_rate_limit", "q"), {"rate": ""})) == \
        "Queue q has no rate limit: nothing changed."


@pytest.mark.parametrize(("form", "text"), [
    ({"rate": "lots"}, "is not N/unit"),
    ({"rate": "0/m"}, "the number of jobs must be 1 to 100000"),
    ({"rate": "5/m", "key": "a b"}, "must be a dotted path"),
    ({"rate": "", "key": "customer"}, "A key needs a rate"),
])
def test_bad_input_is_refused_with_a_message(mc: Client, qc: Any, form: dict[str, str],
                                             text: str) -> None:
    qc.queues["q"].put("tests.Job", {})
    assert text in last(mc.post(url("queue_rate_limit", "q"), form))
    assert qc.queues["q"].rate_limit() is None


def test_a_viewer_sees_the_limit_but_no_form(viewer: Any, as_user: Any, qc: Any) -> None:
    qc.queues["q"].put("tests.Job", {})
    qc.queues["q"].set_rate_limit("10/s")
    html = as_user(viewer).get(url("queue", "q")).content.decode()
    assert "At most <strong>10/s</strong>" in html and "Save rate limit" not in html
    assert as_user(viewer).post(url("queue_rate_limit", "q"), {"rate": ""}).status_code == 403
    assert qc.queues["q"].rate_limit() is not None
