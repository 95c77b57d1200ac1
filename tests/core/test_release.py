"""The `release` extension: a stopping worker gives a job back without spending a retry."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from tests.core.conftest import snapshot

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def test_release_keeps_retries_and_requeues(lua: Any, r: redis.Redis, events: Events) -> None:
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0, "retries", 3, "priority", 2)
    lua("pop", 1, "queue", "w1", 1)
    lua("retry", 2, "jid", "queue", "w1", 0)  # one retry spent before
    lua("pop", 3, "queue", "w1", 1)
    events()
    assert lua("release", 4, "jid", "w1") == "waiting"
    job = lua.json("get", 4, "jid")
    assert (job["state"], job["worker"], job["remaining"], job["priority"]) == \
        ("waiting", "", 2, 2)
    assert r.zcard("ql:q:queue-locks") == 0
    assert r.zcard("ql:w:w1:jobs") == 0
    assert r.zscore("ql:q:queue-work", "jid") is not None
    assert job["history"][-1]["what"] == "put"
    channels = [channel for channel, _ in events()]
    assert "ql:wake:queue" in channels and "ql:log" in channels
    assert lua.json("pop", 5, "queue", "w2", 1)[0]["jid"] == "jid"


def test_release_frees_throttle_slot(lua: Any) -> None:
    lua("throttle.set", 0, "t", 1)
    lua("put", 0, "worker", "queue", "a", "klass", {}, 0, "throttles", ["t"])
    lua("put", 0.5, "worker", "queue", "b", "klass", {}, 0, "throttles", ["t"])
    assert [j["jid"] for j in lua.json("pop", 1, "queue", "w1", 2)] == ["a"]
    lua("release", 2, "a", "w1")
    assert lua("throttle.locks", 2, "t") == []
    # the slot went to b (admitted from throttled); a waits for it now
    assert [j["jid"] for j in lua.json("pop", 3, "queue", "w2", 2)] == ["b"]
    assert lua.json("get", 3, "a")["state"] == "throttled"


@pytest.mark.parametrize("jid,worker,match", [
    ("jid", "thief", "another worker"),
    ("nope", "w1", "does not exist"),
    ("waiting", "w1", "not currently running: waiting"),
    ("bad jid!", "w1", 'Arg "jid"'),
])
def test_release_refused_changes_nothing(lua: Any, r: redis.Redis, jid: str, worker: str,
                                         match: str) -> None:
    lua("put", 0, "worker", "queue", "jid", "klass", {}, 0)
    lua("pop", 1, "queue", "w1", 1)
    lua("put", 1, "worker", "queue", "waiting", "klass", {}, 0)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=match):
        lua("release", 2, jid, worker)
    assert snapshot(r) == before
