"""The worker's hot path: reserve and complete_and_reserve."""

from __future__ import annotations

import pytest
import redis

from django_qless.core import Client, LostLockError
from tests.core.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(4_000_000.0)


def test_reserve_takes_queues_in_order(client: Client, clock: FakeClock) -> None:
    client.queues["low"].put("K", {"n": "low"}, jid="l1")
    clock.advance(1)
    client.queues["high"].put("K", {"n": "high"}, jid="h1")
    jobs, wake = client.reserve(["high", "low"], count=5)
    assert [j.jid for j in jobs] == ["h1", "l1"]
    assert wake is None
    assert all(j.state == "running" and j.worker_name == "w1" for j in jobs)
    assert jobs[0].data == {"n": "high"}
    # Nothing waiting; the earliest thing due is h1's lock expiry, 60 s away.
    assert client.reserve("high") == ([], 60.0)
    assert client.reserve("empty") == ([], None)


def test_reserve_reports_when_scheduled_work_is_due(client: Client) -> None:
    client.queues["q"].put("K", {}, delay=12.5)
    jobs, wake = client.reserve(["q"])
    assert jobs == []
    assert wake == pytest.approx(12.5)


def test_reserve_as_another_worker(client: Client) -> None:
    client.queues["q"].put("K", {}, jid="a")
    jobs, _ = client.reserve(["q"], worker="other-7")
    assert jobs[0].worker_name == "other-7"
    # The job remembers who popped it, so completing it acts as that worker.
    assert jobs[0].complete() == "complete"


def test_complete_and_reserve(client: Client, clock: FakeClock, r: redis.Redis) -> None:
    q = client.queues["q"]
    for i in range(3):
        clock.advance(1)
        q.put("K", {"i": i}, jid=f"j{i}")
    jobs, _ = client.reserve(["q"])
    assert [j.jid for j in jobs] == ["j0"]
    state, more, wake = client.complete_and_reserve(jobs[0], ["q"], count=2)
    assert state == "complete"
    assert jobs[0].state == "complete"
    assert [j.jid for j in more] == ["j1", "j2"]
    assert wake is None
    assert client.jobs["j0"].state == "complete"
    state, none, wake = client.complete_and_reserve(more[0], ["q"], count=0)
    assert (state, none) == ("complete", [])
    more[1].data["i"] = 99
    state, none, _ = client.complete_and_reserve(more[1], ["q"])
    assert none == []
    assert r.hget("ql:j:j2", "data") == '{"i":99}'
    # The same attempt again (a repeat after a lost reply) gets the recorded result ...
    assert client.complete_and_reserve(more[1], ["q"])[:2] == ("complete", [])
    # ... another attempt token is refused.
    with pytest.raises(LostLockError):
        client.call("complete.reserve", "j2", "w1", "q", "{}", "another", 1, "q")
