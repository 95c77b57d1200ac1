"""The hand-off extension: jobs go straight to idle workers waiting on `reserve.wait`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.core.conftest import snapshot
from tests.core.handoff_listener import Listener

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def wait_idle(lua: Any, now: float, worker: str, *queues: str, ttl: float = 10) -> Any:
    return lua.json("reserve.wait", now, worker, ttl, 1, *queues)


def test_an_idle_worker_registers_and_gets_the_next_job(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener], events: Events
) -> None:
    worker = listen("w1")
    assert wait_idle(lua, 100, "w1", "a", "b") == {"jobs": [], "wake": -1}
    assert r.hgetall("ql:idle") == {"w1": "a b"}
    assert r.zscore("ql:idle:a", "w1") == r.zscore("ql:idle:b", "w1") == 110
    events()
    lua("put", 101, "client", "a", "jid", "klass", {"x": 1}, 0, "priority", 3)
    (handed,) = worker.jobs()
    # The same job object a reserve reply carries: running for w1, with its lease.
    assert {k: handed[k] for k in ("jid", "worker", "state", "queue", "priority", "klass")} == \
        {"jid": "jid", "worker": "w1", "state": "running", "queue": "a", "priority": 3,
         "klass": "klass"}
    assert json.loads(handed["data"]) == {"x": 1}
    job = lua.json("get", 102, "jid")
    assert (job["state"], job["worker"]) == ("running", "w1")
    assert [h["what"] for h in job["history"]] == ["put", "popped"]
    assert r.zscore("ql:w:w1:jobs", "jid") == handed["expires"]
    assert lua.json("stats", 102, "a", 101)["wait"]["count"] == 1
    # Registered on both queues, gone from both; the queue got no wake-up (nothing left).
    assert r.hgetall("ql:idle") == {} and not r.exists("ql:idle:a", "ql:idle:b")
    channels = [channel for channel, _ in events()]
    assert "ql:wake:a" not in channels
    lua("put", 103, "client", "a", "next", "klass", {}, 0)
    assert worker.jobs() == []  # one job per registration
    assert "ql:wake:a" in [channel for channel, _ in events()]


def test_jobs_spread_over_idle_workers_and_the_rest_wakes_the_queue(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener], events: Events
) -> None:
    one, two = listen("w1"), listen("w2")
    wait_idle(lua, 100, "w1", "q")
    wait_idle(lua, 100.5, "w2", "q")
    events()
    lua("put.many", 101, "client", "q", 3, *[
        v for jid in ("j1", "j2", "j3") for v in (jid, "klass", "{}", 0, 0)])
    # Longest-waiting first; the third job stays waiting, and a wake-up says so.
    assert [j["jid"] for j in one.jobs()] == ["j1"]
    assert [j["jid"] for j in two.jobs()] == ["j2"]
    assert lua.json("get", 102, "j3")["state"] == "waiting"
    assert ("ql:wake:q", "q") in events()


@pytest.mark.parametrize("why", ["not listening", "registration lapsed"])
def test_no_hand_off_leaves_the_job_waiting_and_wakes_the_queue(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener], events: Events, why: str
) -> None:
    worker = listen("w1") if why != "not listening" else None
    wait_idle(lua, 100, "w1", "q", ttl=5)
    now = 106 if why == "registration lapsed" else 101
    events()
    lua("put", now, "client", "q", "jid", "klass", {}, 0)
    assert worker is None or worker.jobs() == []
    assert lua.json("get", now, "jid")["state"] == "waiting"
    assert ("ql:wake:q", "q") in events()


@pytest.mark.parametrize("why", ["paused", "throttled"])
def test_a_job_not_poppable_yet_is_handed_over_once_it_is(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener], events: Events, why: str
) -> None:
    worker = listen("w1")
    wait_idle(lua, 100, "w1", "q")
    if why == "paused":
        lua("pause", 100, "q")
    else:
        lua("throttle.set", 100, "t", 1)
        lua("put", 100, "client", "other", "holder", "klass", {}, 0, "throttles", ["t"])
        lua("pop", 100, "other", "w9", 1)
    lua("put", 101, "client", "q", "jid", "klass", {}, 0, "throttles",
        ["t"] if why == "throttled" else [])
    assert worker.jobs() == []
    assert lua.json("get", 101, "jid")["state"] == ("waiting" if why == "paused" else "throttled")
    assert r.hgetall("ql:idle") == {"w1": "q"}  # still waiting
    if why == "paused":
        lua("unpause", 102, "q")
    else:
        lua("complete", 102, "holder", "w9", "other", {})  # frees the slot
    assert [j["jid"] for j in worker.jobs()] == ["jid"]
    assert lua.json("get", 103, "jid")["worker"] == "w1"


def test_a_worker_skipped_because_it_stopped_listening_is_forgotten(
    lua: Any, r: redis.Redis, events: Events
) -> None:
    wait_idle(lua, 100, "gone", "q")
    lua("put", 101, "client", "q", "jid", "klass", {}, 0)
    assert r.hgetall("ql:idle") == {} and not r.exists("ql:idle:q")
    assert lua.json("get", 101, "jid")["state"] == "waiting"


def test_a_reserve_that_finds_work_unregisters(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener]
) -> None:
    listen("w1")
    wait_idle(lua, 100, "w1", "q")
    lua("pause", 100, "q")
    lua("put", 101, "client", "q", "jid", "klass", {}, 0)
    assert r.hgetall("ql:idle") == {"w1": "q"}
    lua("unpause", 102, "q")
    lua("put", 102, "client", "q", "later", "klass", {}, 0)
    r.hset("ql:idle", "w1", "q")  # as if w1 registered again meanwhile
    r.zadd("ql:idle:q", {"w1": 200})
    reply = wait_idle(lua, 103, "w1", "q")
    assert [j["jid"] for j in reply["jobs"]] == ["later"]
    assert r.hgetall("ql:idle") == {} and not r.exists("ql:idle:q")


def test_lapsed_registrations_are_dropped_when_a_worker_registers(
    lua: Any, r: redis.Redis
) -> None:
    wait_idle(lua, 100, "old", "q", ttl=1)
    wait_idle(lua, 200, "new", "q", ttl=1)
    assert r.zrange("ql:idle:q", 0, -1) == ["new"]


@pytest.mark.parametrize("args,match", [
    (("w1", 0, 1, "q"), 'Arg "ttl" must be > 0'),
    (("w1", -1, 1, "q"), 'Arg "ttl" must be > 0'),
    (("w1", 3601, 1, "q"), 'Arg "ttl" must be > 0 and <= 3600'),
    (("w1", "soon", 1, "q"), 'Arg "ttl" missing or not a number'),
    (("w1", "nan", 1, "q"), 'Arg "ttl" missing or not a number'),
    (("w1", 5, 0, "q"), 'Arg "count"'),
    (("w1", 5, 1), 'Arg "queue" missing'),
    (("w1", 5, 1, "bad queue"), 'Arg "queue" invalid'),
    (("", 5, 1, "q"), 'Arg "worker"'),
])
def test_reserve_wait_refuses_bad_arguments_and_changes_nothing(
    lua: Any, r: redis.Redis, args: tuple[Any, ...], match: str
) -> None:
    lua("put", 0, "client", "q", "jid", "klass", {}, 0)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=match):
        lua("reserve.wait", 1, *args)
    assert snapshot(r) == before


def test_a_registered_worker_holding_a_job_is_not_handed_another(
    lua: Any, r: redis.Redis, listen: Callable[[str], Listener], events: Events
) -> None:
    """A registration that outlived the worker's idleness (it took a job by a plain reserve
    meanwhile) is dropped at the next hand-off: the job goes to a really idle worker, or
    stays ready with a wake-up, instead of waiting behind the running one."""
    busy, idle = listen("busy"), listen("idle")
    wait_idle(lua, 100, "busy", "a")
    lua("put", 100.5, "client", "b", "first", "klass", {}, 0)
    assert lua.json("reserve", 101, "busy", 1, "b")["jobs"][0]["jid"] == "first"
    wait_idle(lua, 101, "idle", "a")
    events()
    lua("put", 102, "client", "a", "second", "klass", {}, 0)
    assert busy.jobs() == []
    assert [j["jid"] for j in idle.jobs()] == ["second"]
    assert r.hgetall("ql:idle") == {}  # the busy worker's stale registration is gone too
    lua("put", 103, "client", "a", "third", "klass", {}, 0)
    assert busy.jobs() == [] and lua.json("get", 103, "third")["state"] == "waiting"
    assert "ql:wake:a" in [channel for channel, _ in events()]
