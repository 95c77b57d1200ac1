"""What a job costs Redis: fields a waiting job stores, writes an idle reserve skips.

Replies are unaffected; these tests pin the stored layout and the skipped writes
(docs/engine.md, "Internal bookkeeping").
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import redis

from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

Q = "q"


def put(lua: Any, jid: str = "jid", *, now: float = 0, delay: float = 0, **opts: Any) -> Any:
    pairs = [x for k, v in opts.items() for x in (k, v)]
    return lua("put", now, "w", Q, jid, "klass", "{}", delay, *pairs)


def test_new_waiting_job_stores_no_defaults(lua: Any, r: redis.Redis) -> None:
    """A new job's hash has no worker or expires field; `get` still shows them."""
    put(lua)
    stored = r.hgetall("ql:j:jid")
    assert not {"worker", "expires"} & set(stored)
    assert stored.get("tags") == (None if KEYSPACE is not None else "{}")  # (lean in a shard)
    job = lua.json("get", 0, "jid")
    assert (job["worker"], job["expires"], job["tags"]) == ("", 0, {})
    assert lua.json("peek", 0, Q, 1)[0] == job


def test_tagged_job_stores_its_tags(lua: Any, r: redis.Redis) -> None:
    """Tags given at put are stored; tag add works on a job that stored none."""
    put(lua, "a", tags=json.dumps(["x"]))
    assert json.loads(str(r.hget("ql:j:a", "tags"))) == ["x"]
    put(lua, "b")
    lua("tag", 0, "add", "b", "y")
    assert lua.json("get", 0, "b")["tags"] == ["y"]
    assert r.zrange("ql:t:y", 0, -1) == ["b"]


def test_moved_job_overwrites_worker_and_expires(lua: Any, r: redis.Redis) -> None:
    """A running job put again loses its worker and expiry (written, not left out)."""
    put(lua)
    assert lua.json("pop", 0, Q, "w", 1)[0]["worker"] == "w"
    put(lua, now=1)
    assert (r.hget("ql:j:jid", "worker"), r.hget("ql:j:jid", "expires")) == ("", "0")
    assert lua.json("get", 1, "jid")["worker"] == ""


def test_cancel_event_of_new_waiting_job_names_empty_worker(
        lua: Any, events: Callable[[], list[tuple[str, str]]]) -> None:
    """The canceled event says worker "" for an existing job, false for an unknown one."""
    put(lua)
    events()
    lua("cancel", 0, "jid", "nope")
    payloads = [json.loads(p) for c, p in events() if c == "ql:log"]
    assert [(p["jid"], p["worker"]) for p in payloads] == [("jid", ""), ("nope", False)]


def test_idle_reserve_keeps_a_valid_due_bound(lua: Any, r: redis.Redis) -> None:
    """An idle reserve writes a queue's `#due` bound only when it is no longer one."""
    lua("reserve", 100, "w", 1, Q)
    first = r.hget("ql:config", "#due:q")
    assert first is not None and float(first) == 101
    lua("reserve", 100.5, "w", 1, Q)
    assert r.hget("ql:config", "#due:q") == first  # still ahead of now: not rewritten
    lua("reserve", 101, "w", 1, Q)
    assert float(str(r.hget("ql:config", "#due:q"))) == 102  # reached: moved on
    put(lua, "s", now=101.2, delay=0.3)  # a timer before the bound: the bound comes down
    lua("reserve", 101.3, "w", 1, Q)
    assert float(str(r.hget("ql:config", "#due:q"))) <= 101.5
    assert lua.json("reserve", 101.6, "w", 1, Q)["jobs"][0]["jid"] == "s"


def test_idle_reserve_checks_each_pause_once(lua: Any, r: redis.Redis) -> None:
    """An empty reserve over n queues asks ql:paused_queues n times (pop and hint share it)."""
    lua("pause", 0, "b")
    r.config_resetstat()
    reply = lua.json("reserve", 0, "w", 1, "a", "b", "c")
    assert reply["jobs"] == [] and reply["wake"] == -1
    stats = r.info("commandstats")
    assert stats["cmdstat_sismember"]["calls"] == 4  # a, b, c at pop; b (paused) at the hint
