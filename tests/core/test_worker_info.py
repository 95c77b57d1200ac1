"""Worker info (engine `worker.hello` / `worker.info`): what the dashboard shows per worker."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
import redis

from django_qless.core import Client, InvalidArgument
from tests.core.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(4_000_000.0)


def test_hello_then_counts_from_the_hot_path(client: Client, clock: FakeClock,
                                             r: redis.Redis) -> None:
    client.workers.hello("w1", "host-a", 4242, ["high", "low"])
    client.queues["high"].put("K", {}, jid="a")
    client.queues["high"].put("K", {}, jid="b")
    client.queues["high"].put("K", {}, jid="c")
    jobs, _ = client.reserve(["high"], count=1)
    clock.advance(5)
    _, jobs, _ = client.complete_and_reserve(jobs[0], ["high"], count=1)
    jobs[0].fail("boom", "it broke")
    [row] = client.workers.info()
    assert row == {"name": "w1", "last_seen": 4_000_005.0,
                   "host": "host-a", "pid": 4242, "queues": ["high", "low"],
                   "started": 4_000_000.0, "done": 1, "failed": 1, "beat": 60.0,
                   "state": "live", "request": ""}
    # A restart under the same name starts the counts again.
    client.workers.hello("w1", "host-a", 4243, ["high"])
    assert client.workers.info("w1")[0]["done"] == 0
    # Forgetting the worker drops its info as well.
    client.workers.deregister("w1")
    assert client.workers.info() == []
    assert not r.exists("ql:w:w1:info")


def test_stock_worker_has_no_host(client: Client) -> None:
    client.queues["q"].put("K", {}, jid="a")
    client.reserve(["q"])
    [row] = client.workers.info()
    assert row["name"] == "w1" and row["host"] is None and row["pid"] is None
    assert row["done"] == 0 and row["queues"] == []


@pytest.mark.parametrize("args", [("w1", "bad host", 1, ["q"]), ("w1", "h", -1, ["q"])])
def test_hello_refuses_bad_input(client: Client, args: tuple) -> None:  # type: ignore[type-arg]
    with pytest.raises(InvalidArgument):
        client.workers.hello(*args)


def test_states_follow_the_beats_of_the_group(client: Client, clock: FakeClock) -> None:
    # Two children of one supervisor: only the supervisor's beats show the idle one alive.
    client.workers.hello("c1", "h", 1, ["q"], beat=10, group="sup")
    client.workers.hello("c2", "h", 2, ["q"], beat=10, group="sup")
    client.workers.hello("lone", "h", 3, ["q"], beat=10)
    for _ in range(6):
        clock.advance(9)
        assert client.workers.beat("sup", members=["c1", "c2"]) == ([], "", False)
    states = {row["name"]: row["state"] for row in client.workers.info()}
    assert states == {"c1": "live", "c2": "live", "lone": "dead"}
    clock.advance(16)  # more than 1.5 beats without one
    assert {row["state"] for row in client.workers.info("c1", "c2")} == {"stale"}
    clock.advance(15)  # more than 3 beats
    [row] = client.workers.info("c1")
    assert row["state"] == "dead" and row["last_seen"] == 4_000_054.0
    client.workers.beat("sup", "draining", members=["c1", "c2"])
    assert {row["state"] for row in client.workers.info("c1", "c2")} == {"draining"}
    # A child that died is no longer a member: the beats stop counting for it (its own
    # last call was its hello, long ago).
    client.workers.beat("sup", members=["c2"])
    assert states_of(client) == {"c1": "dead", "c2": "live", "lone": "dead"}


def states_of(client: Client) -> dict[str, str]:
    return {row["name"]: row["state"] for row in client.workers.info()}


def test_dead_workers_are_forgotten_after_retention_by_the_listing(
        client: Client, clock: FakeClock, r: redis.Redis) -> None:
    client.config["max-worker-age"] = 100
    client.workers.hello("w1", "h", 1, ["q"], beat=10)  # (the client's own name)
    client.workers.hello("idle", "h", 2, ["q"], beat=10, group="sup")
    client.queues["q"].put("K", {}, jid="a")
    client.reserve(["q"])  # (its job keeps its history)
    for _ in range(11):
        clock.advance(10)
        client.workers.beat("sup", members=["idle"])
    client.workers.counts  # noqa: B018 (the listing forgets up to 100 dead workers)
    assert [row["name"] for row in client.workers.info()] == ["idle"]
    assert not r.exists(client.keyspace.key("w:w1:info"), client.keyspace.key("w:w1:jobs"))
    assert any(h.get("worker") == "w1" for h in client.jobs["a"].history)


def test_request_is_kept_for_the_group_and_published(
        client: Client, clock: FakeClock, events: Callable[[], list[tuple[str, str]]]) -> None:
    client.workers.hello("c1", "h", 1, ["q"], beat=10, group="sup")
    client.workers.beat("sup", "start")
    events()
    client.workers.request("c1", "quiet")
    assert [(c, json.loads(d)) for c, d in events()] == [
        ("ql:w:c1", {"event": "quiet", "worker": "c1"})]
    assert client.workers.info("c1")[0]["request"] == "quiet"
    assert client.workers.beat("sup").request == "quiet"
    assert client.workers.beat("sup").request == ""  # (once)
    assert client.workers.info("c1")[0]["request"] == "quiet"  # pending until it is quiet
    client.workers.beat("sup", "draining")
    assert client.workers.info("c1")[0]["request"] == ""
    client.workers.request("c1", "stop")
    assert client.workers.beat("sup", "start").request == ""  # a new start forgets it


def test_unchanged_members_are_kept_and_asked_again_once_lost(
        client: Client, clock: FakeClock, r: redis.Redis) -> None:
    client.workers.hello("c1", "h", 1, ["q"], beat=10, group="sup")
    assert client.workers.beat("sup", members=["c1"]).members_lost is False
    clock.advance(20)
    assert client.workers.beat("sup", members=None).members_lost is False
    assert states_of(client) == {"c1": "live"}
    r.delete(client.keyspace.key("wg:sup"))
    assert client.workers.beat("sup", members=None).members_lost is True
    assert client.workers.beat("sup", members=["c1"]).members_lost is False
    assert states_of(client) == {"c1": "live"}


def test_beat_refuses_bad_input(client: Client, r: redis.Redis) -> None:
    for call in (lambda: client.call("worker.beat", "g", "asleep", "", "0"),
                 lambda: client.call("worker.beat", "g", "live", "a\tb", "0"),
                 lambda: client.call("worker.beat", "g", "live", "", "2"),
                 lambda: client.call("worker.beat", "g", "live", "a:b", "0"),
                 lambda: client.call("worker.beat", "g", "live", "", "1", "bad queue")):
        with pytest.raises(InvalidArgument):
            call()
    assert r.dbsize() == 0


def test_request_refuses_unknown_and_dead_workers(client: Client, clock: FakeClock,
                                                  r: redis.Redis) -> None:
    with pytest.raises(InvalidArgument, match="not known"):
        client.workers.request("nobody", "quiet")
    client.workers.hello("w1", "h", 1, ["q"], beat=10)
    clock.advance(31)
    with pytest.raises(InvalidArgument, match="dead"):
        client.workers.request("w1", "stop")
    with pytest.raises(InvalidArgument):
        client.workers.request("w1", "pause")
    assert not r.exists(client.keyspace.key("wg:w1"))
