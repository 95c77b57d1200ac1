"""Pages read Redis in a fixed number of round trips, however many queues there are."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from redis.connection import AbstractConnection

from tests.ui.conftest import TOKEN


@pytest.fixture
def round_trips(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], int]]:
    """Count the packets sent to the real Redis (one per round trip, pipelines included)."""
    sent = [0]
    original = AbstractConnection.send_packed_command

    def counting(self: AbstractConnection, command: Any, check_health: bool = True) -> None:
        sent[0] += 1
        original(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counting)

    def reset_and_read() -> int:
        count, sent[0] = sent[0], 0
        return count

    yield reset_and_read


def _queues(qc: Any, names: range) -> None:
    for n in names:
        queue = qc.queues[f"q{n}"]
        queue.put("tests.app.legacy_jobs.Legacy", {}, jid=f"j{n}")
        queue.set_throttle(n + 1)


PAGES = [
    ("overview", (), {}),
    ("throttles", (), {}),
    ("queue", ("q0",), {}),
    ("api_overview", (), {}),
    ("metrics", (), {"HTTP_AUTHORIZATION": f"Bearer {TOKEN}"}),
]


@pytest.mark.parametrize(("page", "args", "headers"), PAGES)
def test_round_trips_do_not_grow_with_queues(
    mc: Client, qc: Any, round_trips: Callable[[], int], page: str, args: tuple[str, ...],
    headers: dict[str, str],
) -> None:
    path = reverse(f"django_qless:{page}", args=args)
    _queues(qc, range(2))
    assert mc.get(path, **headers).status_code == 200  # warm up: engine loaded, session read
    round_trips()
    assert mc.get(path, **headers).status_code == 200
    few = round_trips()
    assert few > 0
    _queues(qc, range(2, 12))
    round_trips()
    assert mc.get(path, **headers).status_code == 200
    assert round_trips() == few


def test_throttles_page_lists_queue_throttles_and_a_lookup(mc: Client, qc: Any) -> None:
    _queues(qc, range(3))
    qc.queues["plain"].put("tests.app.legacy_jobs.Legacy", {}, jid="unthrottled")
    qc.throttles["api"].set(1)
    for jid in ("h1", "h2"):
        qc.queues["q0"].put("tests.app.legacy_jobs.Legacy", {}, jid=jid, throttles=["api"])
    qc.queues["q0"].pop(3)
    body = mc.get(reverse("django_qless:throttles") + "?id=api").content.decode()
    for n in range(3):
        assert f"ql:q:q{n}" in body
    assert "ql:q:plain" not in body  # a queue without a throttle is not listed
    assert "h1" in body or "h2" in body
