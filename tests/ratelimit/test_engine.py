"""Rate limits in the engine: budgets, windows, keys, kinds and the idle wake hint."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_qless.core.audit.auditor import Auditor
from django_qless.core.engine.invoke import Keyspace
from tests.core.keyspace_mode import KEYSPACE, PREFIX

__all__: list[str] = []


def put(lua: Any, now: float, jid: str, data: Any = None, queue: str = "q",
        klass: str = "K", priority: int = 0) -> None:
    lua("put", now, "client", queue, jid, klass, data or {}, 0, "priority", priority)


def pop(lua: Any, now: float, count: int = 10, queue: str = "q") -> list[str]:
    return [job["jid"] for job in lua.json("pop", now, queue, "w1", count)]


def test_a_queue_limit_starts_at_most_n_per_window(lua: Any) -> None:
    lua("rate.set", 99, "queue", "q", 3, 10)
    for i in range(5):
        put(lua, 90 + i, f"j{i}")
    assert pop(lua, 100) == ["j0", "j1", "j2"]
    assert pop(lua, 105) == []
    reply = lua.json("reserve", 105, "w1", 1, "q")
    # the window opens at 110 (half a millisecond later: the logs count whole milliseconds)
    assert reply["jobs"] == [] and reply["wake"] == pytest.approx(5, abs=0.001)
    assert pop(lua, 109.999) == []
    assert pop(lua, 110.001) == ["j3", "j4"]


def test_the_window_slides(lua: Any) -> None:
    lua("rate.set", 0, "queue", "q", 2, 10)
    for i in range(4):
        put(lua, 90 + i, f"j{i}")
    assert pop(lua, 100, 1) == ["j0"]
    assert pop(lua, 104, 1) == ["j1"]
    assert pop(lua, 105) == []
    assert pop(lua, 110.001) == ["j2"]  # j0's start left the window; j1's is still in it
    assert pop(lua, 113) == []
    assert pop(lua, 114.001) == ["j3"]


def test_a_start_from_a_lagging_clock_is_recorded_at_the_newest_start(
        lua: Any, r: redis.Redis) -> None:
    # Two workers read their clocks before their calls reach Redis: the second call to run
    # may carry the older time. Its start counts from the newer one, or the window would
    # let a third start in 3 ms early.
    lua("rate.set", 0, "queue", "q", 2, 10)
    for i in range(4):
        put(lua, 90 + i, f"j{i}")
    assert pop(lua, 100, 1) == ["j0"]
    assert pop(lua, 110.005, 1) == ["j1"]
    assert pop(lua, 110.002, 1) == ["j2"]  # only j1 is in its window: admitted
    log = r.zrange(f"{PREFIX}rl:queue:q-log", 0, -1, withscores=True)
    assert [score for _, score in log] == [110005, 110005]
    assert pop(lua, 120.003, 1) == []
    assert pop(lua, 120.006, 1) == ["j3"]


def test_a_keyed_limit_gives_each_key_its_own_budget(lua: Any, r: redis.Redis) -> None:
    lua("rate.set", 0, "queue", "q", 1, 10, "customer")
    put(lua, 81, "a1", {"customer": "A"}, priority=3)
    put(lua, 82, "a2", {"customer": "A"}, priority=2)
    put(lua, 83, "b1", {"customer": "B"}, priority=1)
    put(lua, 84, "n1", {}, priority=0)
    assert sorted(pop(lua, 100)) == ["a1", "b1", "n1"]
    # a2 waits for A's window, still `waiting`, out of the work set
    assert lua.json("get", 100, "a2")["state"] == "waiting"
    assert r.zscore(f"{PREFIX}q:q-ratelimited", "a2") == pytest.approx(110, abs=0.001)
    reply = lua.json("reserve", 101, "w1", 1, "q")
    assert reply["wake"] == pytest.approx(9, abs=0.001)
    status = lua.json("rate.get", 105, "queue", "q")
    assert status["keys"] == 3 and status["used"] == 1
    assert status["next"] == pytest.approx(5, abs=0.001)
    assert status["limited"] == 1
    assert pop(lua, 110.001) == ["a2"]


def test_a_nested_key_path(lua: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 60, "kwargs.user")
    put(lua, 85, "x1", {"kwargs": {"user": 7}})
    put(lua, 86, "x2", {"kwargs": {"user": 7}})
    put(lua, 87, "y1", {"kwargs": {"user": 8}})
    assert sorted(pop(lua, 100)) == ["x1", "y1"]
    assert pop(lua, 159) == []
    assert pop(lua, 160.001) == ["x2"]


def test_a_kind_limit_counts_one_class_across_queues(lua: Any) -> None:
    lua("rate.set", 0, "kind", "Mail", 2, 60)
    put(lua, 88, "m1", queue="a", klass="Mail")
    put(lua, 89, "m2", queue="b", klass="Mail")
    put(lua, 90, "m3", queue="b", klass="Mail")
    put(lua, 91, "o1", queue="b", klass="Other")
    assert pop(lua, 100, queue="a") == ["m1"]
    assert sorted(pop(lua, 101, queue="b")) == ["m2", "o1"]
    assert lua.json("rate.kinds", 101) == ["Mail"]
    assert pop(lua, 160.001, queue="b") == ["m3"]


def test_deleting_a_queue_limit_releases_its_waiting_jobs(lua: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 3600, "c")
    put(lua, 92, "a1", {"c": 1})
    put(lua, 93, "a2", {"c": 1})
    assert pop(lua, 100) == ["a1"]
    lua("rate.delete", 101, "queue", "q")
    assert lua("rate.get", 101, "queue", "q") is None
    assert pop(lua, 101) == ["a2"]


def test_a_canceled_job_waiting_for_its_window_is_not_revived(lua: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 10, "c")
    put(lua, 94, "a1", {"c": 1})
    put(lua, 95, "a2", {"c": 1})
    assert pop(lua, 100) == ["a1"]
    lua("cancel", 101, "a2")
    assert pop(lua, 110) == []


def test_an_idle_worker_learns_when_the_window_opens(lua: Any, events: Any,
                                                    listen: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 30)
    put(lua, 96, "j1")
    put(lua, 97, "j2")
    assert pop(lua, 100) == ["j1"]
    hand = listen("w2")
    reply = lua.json("reserve.wait", 101, "w2", 60, 1, "q")
    assert reply["jobs"] == [] and reply["wake"] == pytest.approx(29, abs=0.001)
    events()
    put(lua, 102, "j3")  # the limit is full: nothing handed to the idle worker
    assert hand.jobs() == []
    assert lua.json("reserve.wait", 130, "w2", 60, 1, "q")["jobs"][0]["jid"] == "j2"


def test_an_idle_worker_that_registered_on_an_empty_queue_learns_the_window(
        lua: Any, events: Any, listen: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 30)
    put(lua, 81, "j1")
    assert pop(lua, 100) == ["j1"]
    hand = listen("w2")
    # nothing waits: the worker hears of no timer and would sleep until its re-check
    assert lua.json("reserve.wait", 101, "w2", 60, 1, "q") == {"jobs": [], "wake": 59}
    lua("complete", 101, "j1", "w1", "q", {})
    assert lua.json("reserve.wait", 101, "w2", 60, 1, "q") == {"jobs": [], "wake": -1}
    events()
    put(lua, 102, "j2")  # over the limit until 130: the idle worker must learn of it
    assert hand.jobs() == []
    assert [c for c, _ in events() if c == "ql:wake:q"] == ["ql:wake:q"]
    reply = lua.json("reserve.wait", 102, "w2", 60, 1, "q")
    assert reply["jobs"] == [] and reply["wake"] == pytest.approx(28, abs=0.001)
    # the worker learned the window from its reply: its own call wakes nobody
    assert [c for c, _ in events() if c == "ql:wake:q"] == []


@pytest.mark.parametrize(("args", "text"), [
    (("hour", "q", 1, 1), 'Arg "scope" must be "queue" or "kind"'),
    (("queue", "", 1, 1), 'Arg "name" missing'),
    (("queue", "bad name", 1, 1), 'Arg "name" invalid'),
    (("queue", "q", 0, 1), 'Arg "max" must be an integer in [1, 100000]'),
    (("queue", "q", 1.5, 1), 'Arg "max" must be an integer'),
    (("queue", "q", 1, "inf"), 'Arg "period" not a number'),
    (("queue", "q", 1, 0), 'Arg "period" must be in [0.001, 2678400]'),
    (("queue", "q", 1, 1, "a..b"), 'Arg "key" must be a dotted path'),
    (("queue", "q", 1, 1, "a b"), 'Arg "key" must be a dotted path'),
])
def test_bad_arguments_are_refused_before_any_write(lua: Any, r: redis.Redis,
                                                    args: tuple[Any, ...], text: str) -> None:
    with pytest.raises(redis.ResponseError, match=text.replace("[", r"\[").replace(".", r"\.")):
        lua("rate.set", 0, *args)
    assert r.keys("*") == []


def test_the_audit_accepts_a_job_set_aside_for_its_window(lua: Any, r: redis.Redis) -> None:
    lua("rate.set", 0, "queue", "q", 1, 60, "c")
    put(lua, 81, "a1", {"c": 1})
    put(lua, 82, "a2", {"c": 1})
    assert pop(lua, 100) == ["a1"]
    assert r.zscore(f"{PREFIX}q:q-ratelimited", "a2") is not None
    assert [v for v in Auditor(r, Keyspace(KEYSPACE)).run() if "a2" in v.subject] == []


def test_changing_a_queue_limit_wakes_its_idle_workers(lua: Any, events: Any,
                                                       listen: Any) -> None:
    lua("rate.set", 0, "queue", "q", 1, 3600)
    put(lua, 81, "j1")
    put(lua, 82, "j2")
    assert pop(lua, 100) == ["j1"]
    hand = listen("w2")
    assert lua.json("reserve.wait", 101, "w2", 60, 1, "q")["jobs"] == []
    lua("rate.set", 102, "queue", "q", 2, 3600)  # room for j2 now: handed to the idle worker
    assert [job["jid"] for job in hand.jobs()] == ["j2"]
