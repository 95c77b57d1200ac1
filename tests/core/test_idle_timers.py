"""Idle workers hear of a timer written after they registered (scheduled, recurring, lock).

An idle worker learns a queue's earliest timer from its `reserve.wait` reply and sleeps until
then (or until its registration lapses). A call that writes an earlier timer publishes the
queue's wake-up, so the worker reserves again and learns it; one that writes a later timer,
or one due after every registration lapses, publishes nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import redis

from tests.core.handoff_listener import Listener
from tests.core.test_put_many import many_args

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def wakes(events: Events, queue: str = "a") -> int:
    """Return how many wake-ups of `queue` were published since the last call."""
    return sum(1 for channel, _ in events() if channel == f"ql:wake:{queue}")


def idle(lua: Any, now: float, worker: str = "w1", ttl: float = 61, *queues: str) -> Any:
    return lua.json("reserve.wait", now, worker, ttl, 1, *(queues or ("a",)))


def test_a_delayed_put_wakes_idle_workers_only_when_it_is_news(lua: Any, events: Events) -> None:
    assert idle(lua, 100) == {"jobs": [], "wake": -1}
    events()
    lua("put", 101, "client", "a", "j1", "klass", {}, 30)
    assert wakes(events) == 1  # the first timer: the idle worker would sleep until 161
    lua("put", 102, "client", "a", "j2", "klass", {}, 40)
    assert wakes(events) == 0  # later than j1's, which the worker learns when it reserves
    assert idle(lua, 103)["wake"] == 28  # what the woken worker learns
    events()
    lua("put", 104, "client", "a", "j3", "klass", {}, 10)
    assert wakes(events) == 1  # earlier than what it learned
    lua("put", 105, "client", "a", "j4", "klass", {}, 500)
    assert wakes(events) == 0  # due after the registration lapses (164): learned in time


def test_no_idle_worker_no_wake_up(lua: Any, r: redis.Redis, events: Events) -> None:
    idle(lua, 100, "w1", 5)
    events()
    lua("put", 200, "client", "a", "j1", "klass", {}, 30)  # the registration lapsed at 105
    lua("put", 201, "client", "b", "j2", "klass", {}, 30)  # nobody ever waited on b
    assert wakes(events, "a") == wakes(events, "b") == 0


def test_one_wake_up_per_call(lua: Any, events: Events) -> None:
    idle(lua, 100)
    events()
    jobs = [(f"j{i}", "klass", {}, 30 - i, {}) for i in range(5)]
    lua("put.many", 101, *many_args(jobs, queue="a"))
    assert wakes(events) == 1


def test_a_retry_with_delay_wakes_idle_workers(lua: Any, events: Events) -> None:
    lua("put", 100, "client", "a", "j1", "klass", {}, 0)
    lua("pop", 100, "a", "busy", 1)
    idle(lua, 101)  # learns j1's lock (160)
    events()
    lua("retry", 102, "j1", "a", "busy", 20)
    assert wakes(events) == 1  # due at 122: before the lock it learned


def test_a_new_or_changed_recurring_job_wakes_idle_workers(lua: Any, events: Events) -> None:
    idle(lua, 100)
    events()
    lua("recur", 101, "a", "r1", "klass", "{}", "interval", 30, 5)
    assert wakes(events) == 1  # first spawn at 106
    lua("recur", 102, "a", "r2", "klass", "{}", "interval", 30, 50)
    assert wakes(events) == 0
    idle(lua, 103)
    events()
    lua("recur.update", 104, "r2", "queue", "b")  # a due time moved to a queue nobody waits on
    assert wakes(events, "b") == 0
    idle(lua, 105, "w2", 61, "b")
    events()
    lua("recur.update", 106, "r1", "queue", "b")  # r1 (due 106) now comes first on b
    assert wakes(events, "b") == 1


def test_a_lock_wakes_idle_workers_only_past_its_grace(
    lua: Any, events: Events, listen: Callable[[str], Listener]
) -> None:
    lua("config.set", 1, "heartbeat", 20)
    lua("config.set", 1, "grace-period", 5)
    listen("taker")
    listen("other")
    idle(lua, 100, "taker", 24)
    idle(lua, 100.5, "other", 24)  # back by 124.5
    events()
    lua("put", 101, "client", "a", "j1", "klass", {}, 0)  # handed to taker: lock 121
    assert wakes(events) == 0  # other learns of it in time (before 121 + grace)
    lua("complete", 102, "j1", "taker", "a", "{}")
    idle(lua, 102, "taker", 24)
    idle(lua, 102, "other", 60)  # would sleep until 162
    events()
    lua("put", 103, "client", "a", "j2", "klass", {}, 0)  # handed to taker: lock 123
    assert wakes(events) == 1
    lua("put", 104, "client", "a", "j3", "klass", {}, 0)  # handed to other
    lua("put", 105, "client", "a", "j4", "klass", {}, 0)
    idle(lua, 106, "third", 60)
    events()
    lua("pop", 106, "a", "busy", 1)  # lock 126: taker's (123) comes first
    assert wakes(events) == 0


def test_a_heartbeat_is_not_news(lua: Any, events: Events) -> None:
    lua("config.set", 1, "heartbeat", 20)
    lua("put", 100, "client", "a", "j1", "klass", {}, 0)
    lua("pop", 100, "a", "busy", 1)
    idle(lua, 101, "w1", 600)
    events()
    lua("heartbeat", 110, "j1", "busy", "{}")
    assert wakes(events) == 0


def test_a_lock_is_no_news_while_one_idle_worker_learns_of_it_in_time(
    lua: Any, events: Events, listen: Callable[[str], Listener]
) -> None:
    lua("config.set", 1, "heartbeat", 20)
    lua("config.set", 1, "grace-period", 5)
    for worker in ("taker", "soon", "late"):
        listen(worker)
    idle(lua, 100, "taker", 23)
    idle(lua, 100, "soon", 24)  # back by 124: reserves before j1's lock (121) + grace
    idle(lua, 100, "late", 3000)
    events()
    lua("put", 101, "client", "a", "j1", "klass", {}, 0)  # handed to taker
    assert wakes(events) == 0  # "soon" handles the expiry, should it come; "late" need not
    lua("put", 102, "client", "a", "j2", "klass", {}, 0)  # handed to soon: lock 122
    assert wakes(events) == 0  # j1's lock (121) comes first
    lua("complete", 103, "j1", "taker", "a", "{}")
    lua("put", 104, "client", "a", "j3", "klass", {}, 0)  # nobody left to hand it to but late
    lua("complete", 105, "j2", "soon", "a", "{}")
    lua("complete", 105, "j3", "late", "a", "{}")
    idle(lua, 106, "taker", 23)
    idle(lua, 106, "late", 3000)
    events()
    lua("put", 107, "client", "a", "j4", "klass", {}, 0)  # handed to taker: lock 127
    assert wakes(events) == 1  # only "late" is idle now: it would learn of it too late
