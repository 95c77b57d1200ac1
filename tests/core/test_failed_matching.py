"""`client.jobs.failed_matching`: a failure group filtered by queue and time, with a cursor."""

from __future__ import annotations

import pytest

from django_qless.core import Client, InvalidArgument
from tests.core.conftest import FakeClock

T0 = 1_000_000.0


def fail(client: Client, clock: FakeClock, queue: str, at: float, group: str = "g") -> str:
    """Put, pop and fail one job in `queue` at time `at`; return its jid."""
    clock.t = at
    jid = client.queues[queue].put("K", {})
    job = client.queues[queue].pop()
    assert job is not None and job.jid == jid
    job.fail(group, "boom")
    return jid


@pytest.fixture
def failures(client: Client, clock: FakeClock) -> dict[str, str]:
    """Six failures in group g: a, b alternating queues, one per hour."""
    return {f"{queue}{hour}": fail(client, clock, queue, T0 + hour * 3600)
            for hour, queue in enumerate("ababab")}


def jids(reply: dict) -> list[str]:
    return [job.jid for job in reply["jobs"]]


def test_queue_filter_keeps_newest_first(client: Client, failures: dict[str, str]) -> None:
    reply = client.jobs.failed_matching("g", queue="a")
    assert jids(reply) == [failures["a4"], failures["a2"], failures["a0"]]
    assert reply["next"] is None and reply["total"] == 6


def test_time_window_is_since_inclusive_until_exclusive(client: Client,
                                                         failures: dict[str, str]) -> None:
    reply = client.jobs.failed_matching("g", since=T0 + 3600, until=T0 + 4 * 3600)
    assert jids(reply) == [failures["b3"], failures["a2"], failures["b1"]]
    both = client.jobs.failed_matching("g", queue="b", since=T0 + 3600, until=T0 + 4 * 3600)
    assert jids(both) == [failures["b3"], failures["b1"]]


def test_the_cursor_pages_through_matches(client: Client, failures: dict[str, str]) -> None:
    first = client.jobs.failed_matching("g", queue="b", count=2)
    assert jids(first) == [failures["b5"], failures["b3"]] and first["next"] == 3
    second = client.jobs.failed_matching("g", queue="b", count=2, cursor=first["next"])
    assert jids(second) == [failures["b1"]] and second["next"] is None


def test_a_scan_budget_bounds_one_call(client: Client, failures: dict[str, str]) -> None:
    reply = client.jobs.failed_matching("g", queue="a", scan=1)
    assert jids(reply) == [] and reply["next"] == 1  # b5 read, no match yet: go on from 1
    reply = client.jobs.failed_matching("g", queue="a", scan=1, cursor=1)
    assert jids(reply) == [failures["a4"]]


def test_bad_filters_are_refused(client: Client) -> None:
    for kwargs in ({"queue": "bad queue"}, {"since": "yesterday"}, {"cursor": -1},
                   {"count": 0}, {"until": float("nan")}):
        with pytest.raises(InvalidArgument):
            client.jobs.failed_matching("g", **kwargs)


def test_failed_newest_is_each_groups_latest_failure(client: Client, clock: FakeClock) -> None:
    q = client.queues["q"]
    for n, group in enumerate(["a", "a", "b"]):
        q.put("K", {}, jid=f"j{n}")
        job = q.pop()
        assert job is not None
        clock.advance(1)
        job.fail(group, f"message {n}")
    newest = client.jobs.failed_newest(["a", "b", "none"])
    assert {g: j.jid for g, j in newest.items()} == {"a": "j1", "b": "j2"}
    assert newest["a"].failure["message"] == "message 1"
    assert client.jobs.failed_newest([]) == {}
