"""Lean job records: stored layout per keyspace and opt-in, identical replies and events.

A lean record leaves out `jid`, `priority` 0, empty `tags` and `remaining` equal to
`retries` (docs/engine.md, "Lean job records"). Shard keyspaces always write them; the
default keyspace only with the config option `lean-job-records` = 1.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_qless.core.audit import audit
from django_qless.core.engine_config import check_config
from django_qless.core.exceptions import InvalidArgument
from tests.core.conftest import Lua
from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

Q = "q"
LEAN_FIELDS = {"jid", "priority", "tags", "remaining"}
# (jid, put options): defaults, and each derivable field with a value that must be stored
JOBS: list[tuple[str, dict[str, Any]]] = [
    ("a", {}),
    ("b", {"priority": 3}),
    ("c", {"tags": ["x", "y"]}),
    ("d", {"retries": 2}),
    ("e", {"priority": -1, "tags": ["x"], "retries": 0}),
    ("f", {}),
    ("g", {}),
]


def put_all(lua: Any, now: float) -> None:
    for jid, opts in JOBS:
        pairs = [x for k, v in opts.items() for x in (k, json.dumps(v) if k == "tags" else v)]
        lua("put", now, "w", Q, jid, "K", '{"n": 1}', 0, *pairs)


def fill_defaults(r: redis.Redis) -> None:
    """Write the fields a lean record leaves out, as a full record holds them."""
    for jid, opts in JOBS:
        key = f"ql:j:{jid}"
        retries = r.hget(key, "retries")
        r.hset(key, mapping={"jid": jid, "priority": str(opts.get("priority", 0)),
                             "tags": json.dumps(opts["tags"]) if "tags" in opts else "{}",
                             "remaining": str(retries)})


def scenario(lua: Any, r: redis.Redis, events: Callable[[], list[tuple[str, str]]],
             form: str) -> list[Any]:
    """Every reader's reply (and the events) for the same jobs stored in `form`."""
    if form == "lean" and KEYSPACE is None:
        lua("config.set", 0, "lean-job-records", 1)
    put_all(lua, 1700000000.25)
    if form == "filled":
        fill_defaults(r)
    events()
    jids = [jid for jid, _ in JOBS]
    out: list[Any] = []

    def read(now: float) -> None:
        out.extend(lua("get", now, jid) for jid in jids)
        out.append(lua("multiget", now, *jids))
        out.append(lua("peek", now, Q, 10))
        out.append(lua("track", now))
        for state in ("waiting", "running", "scheduled", "stalled", "complete"):
            out.append(lua("jobs", now, state, Q) if state != "complete"
                       else lua("jobs", now, state))
        out.append(lua("failed", now))
        out.append(lua("failed", now, "grp", 0, 10))
        out.append(lua("queues", now))

    lua("track", 1700000001, "track", "b")
    read(1700000002)
    out.append(lua("pop", 1700000003.5, Q, "w", 7))  # every job
    out.append(lua("complete", 1700000004, "b", "w", Q, "{}"))
    out.append(lua("fail", 1700000004, "c", "w", "grp", "boom"))
    out.append(lua("retry", 1700000005, "e", Q, "w"))  # retries 0: exhausted
    out.append(lua("retry", 1700000005, "a", Q, "w", 0))
    out.append(lua("requeue", 1700000006, "w", Q, "d", "K", "{}", 0))
    out.append(lua("priority", 1700000006, "f", 0))
    out.append(lua("tag", 1700000006, "add", "g", "z"))
    out.append(lua("tag", 1700000006, "remove", "g", "z"))
    # (the flat reply carries the stored texts: compared as the client decodes it)
    out.append(lua.json("reserve", 1700000007, "w2", 2, Q))
    read(1700000008)
    out.append(events())
    return out


@pytest.mark.skipif(KEYSPACE is not None, reason="a shard keyspace only writes lean records")
def test_lean_and_full_records_reply_alike(lua: Any, r: redis.Redis, events: Any) -> None:
    """Opt-in lean records give byte-identical replies and events to full ones."""
    full = scenario(lua, r, events, "full")
    r.flushdb()
    assert scenario(lua, r, events, "lean") == full


def test_lean_and_filled_records_reply_alike(lua: Any, r: redis.Redis, events: Any) -> None:
    """A lean record and the same record with its defaults written reply alike (readers
    tolerate both forms, e.g. records written before a switch)."""
    lean = scenario(lua, r, events, "lean")
    r.flushdb()
    assert scenario(lua, r, events, "filled") == lean


def stored(r: redis.Redis) -> dict[str, set[str]]:
    return {jid: set(r.hgetall(f"ql:j:{jid}")) & LEAN_FIELDS for jid, _ in JOBS}


LEAN_LAYOUT = {"a": set(), "b": {"priority"}, "c": {"tags"}, "d": set(),
               "e": {"priority", "tags"}, "f": set(), "g": set()}


def test_layout_per_keyspace_and_opt_in(lua: Any, r: redis.Redis) -> None:
    """Default keyspace: full unless opted in; shard keyspace: always lean."""
    put_all(lua, 10)
    if KEYSPACE is None:
        assert all(fields == LEAN_FIELDS for fields in stored(r).values())
        r.flushdb()
        lua("config.set", 0, "lean-job-records", 1)
        put_all(lua, 10)
    assert stored(r) == LEAN_LAYOUT


def test_opt_out_writes_full_records_again(lua: Any, r: redis.Redis) -> None:
    """Setting the option back to 0 (or unsetting it) writes full records; old lean ones
    still read."""
    if KEYSPACE is not None:
        pytest.skip("a shard keyspace only writes lean records")
    lua("config.set", 0, "lean-job-records", 1)
    lua("put", 1, "w", Q, "lean", "K", "{}", 0)
    lua("config.set", 0, "lean-job-records", 0)
    lua("put", 1, "w", Q, "full", "K", "{}", 0)
    assert set(r.hgetall("ql:j:full")) >= LEAN_FIELDS
    assert not set(r.hgetall("ql:j:lean")) & LEAN_FIELDS
    a, b = lua.json("multiget", 2, "lean", "full")
    assert {**a, "jid": "full"} == b


def test_spawned_child_is_lean(lua: Any, r: redis.Redis) -> None:
    """A recurring child follows the same rule as put."""
    if KEYSPACE is None:
        lua("config.set", 0, "lean-job-records", 1)
    lua("recur", 0, Q, "rec", "K", "{}", "interval", 60, 0, "priority", 2, "retries", 4)
    child = lua.json("peek", 1, Q, 1)[0]
    assert set(r.hgetall("ql:j:rec-1")) & LEAN_FIELDS == {"priority"}
    assert (child["jid"], child["priority"], child["tags"], child["remaining"]) == (
        "rec-1", 2, {}, 4)


def test_lean_remaining_counts_down_from_retries(lua: Any, r: redis.Redis) -> None:
    """retry and lock loss read a missing `remaining` as `retries`."""
    if KEYSPACE is None:
        lua("config.set", 0, "lean-job-records", 1)
    lua("put", 0, "w", Q, "j", "K", "{}", 0, "retries", 3)
    lua("pop", 1, Q, "w", 1)
    assert lua("retry", 2, "j", Q, "w") == 2
    lua("put", 0, "w", Q, "k", "K", "{}", 0, "retries", 3)
    lua("config.set", 0, "heartbeat", 10)
    lua("config.set", 0, "grace-period", 0)
    lua("pop", 3, Q, "w", 2)
    got = {j["jid"]: j["remaining"] for j in lua.json("pop", 100, Q, "w2", 2)}
    assert got == {"j": 1, "k": 2}


@pytest.mark.parametrize("value", ["2", "-1", "yes", "0.5"])
def test_option_is_validated(lua: Any, value: str) -> None:
    """config.set refuses anything but 0 or 1 (the engine and the Python client)."""
    with pytest.raises(redis.ResponseError, match='"value"'):
        lua("config.set", 0, "lean-job-records", value)
    with pytest.raises(InvalidArgument):
        check_config("lean-job-records", value)


@pytest.mark.skipif(KEYSPACE is not None, reason="shard keyspaces: test_audit_keyspace.py")
def test_lean_records_audit_clean(lua: Any, r: redis.Redis, events: Any) -> None:
    """The auditor reads lean records (missing remaining = retries) and finds nothing."""
    scenario(lua, r, events, "lean")
    report = audit(r)
    assert report.violations == []


def test_option_is_per_database(lua: Any, redis_server: Any) -> None:
    """One function library serves every database of a server: the option of one database
    must not decide another's records."""
    if KEYSPACE is not None:
        pytest.skip("a shard keyspace only writes lean records")
    other = redis.Redis(unix_socket_path=redis_server.socket_path, db=1, decode_responses=True)
    other.flushdb()
    lua("config.set", 0, "lean-job-records", 1)
    lua("put", 1, "w", Q, "a", "K", "{}", 0)
    Lua(other)("put", 1, "w", Q, "b", "K", "{}", 0)
    assert set(other.hgetall("ql:j:b")) >= LEAN_FIELDS
    other.close()
