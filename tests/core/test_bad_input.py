"""Bad input (docs/guarantees.md, docs/engine.md): every refused call raises a clear
error and leaves Redis byte-for-byte unchanged."""

from __future__ import annotations

import json
import os
import random
from typing import Any

import pytest
import redis

from django_qless.core.audit import audit
from tests.core.conftest import snapshot

__all__: list[str] = []

NOW = 10
# Non-numbers that Lua's tonumber would otherwise accept or turn into non-finite values.
BAD_NUMBERS = ["nan", "inf", "-inf", "1e309", "0x10", " 5", "5 ", "abc"]
PUT = ["worker", "queue", "new", "klass", "{}", 0]


def put_with(slot: int, value: Any, *pairs: Any) -> list[Any]:
    """Put arguments with one positional slot replaced."""
    args = list(PUT)
    args[slot] = value
    return [*args, *pairs]


RECUR = ["queue", "rec2", "klass", "{}", "interval", 60, 0]


def recur_with(slot: int, value: Any, *pairs: Any) -> list[Any]:
    """Recur arguments with one positional slot replaced."""
    args = list(RECUR)
    args[slot] = value
    return [*args, *pairs]


def case(ident: str, command: str, args: list[Any], match: str) -> Any:
    """One table row."""
    return pytest.param(command, args, match, id=ident)


def numeric(prefix: str, command: str, build: Any, match: str) -> list[Any]:
    """Rows feeding every bad number to one numeric argument."""
    return [case(f"{prefix}={bad!r}", command, build(bad), match) for bad in BAD_NUMBERS]


CASES: list[Any] = [
    # invocation
    case("unknown-command", "frobnicate", [], "Unknown command frobnicate"),
    *[case(f"now={bad!r}@{cmd}", "@now", [cmd, bad], 'Arg "now"')
      for cmd in ("put", "pop", "complete", "recur", "config.set", "cancel")
      for bad in [*BAD_NUMBERS, "-1", ""]],
    # put: numbers
    *numeric("put.delay", "put", lambda v: put_with(5, v), 'Put\\(\\): Arg "delay"'),
    *numeric("put.priority", "put", lambda v: put_with(5, 0, "priority", v), 'Arg "priority"'),
    *numeric("put.retries", "put", lambda v: put_with(5, 0, "retries", v), 'Arg "retries"'),
    case("put.delay=-5", "put", put_with(5, -5), 'Arg "delay"'),
    case("put.delay=10y+1", "put", put_with(5, 315360001), 'Arg "delay"'),
    case("put.priority=1.5", "put", put_with(5, 0, "priority", 1.5), 'Arg "priority"'),
    case("put.priority=2^31", "put", put_with(5, 0, "priority", 2147483648), 'Arg "priority"'),
    case("put.priority=-2^31-1", "put", put_with(5, 0, "priority", -2147483649),
         'Arg "priority"'),
    case("put.priority=high", "put", put_with(5, 0, "priority", "high"), 'Arg "priority"'),
    case("put.retries=-1", "put", put_with(5, 0, "retries", -1), 'Arg "retries"'),
    case("put.retries=5.5", "put", put_with(5, 0, "retries", 5.5), 'Arg "retries"'),
    case("put.retries=1001", "put", put_with(5, 0, "retries", 1001), 'Arg "retries"'),
    # put: names
    *[case(f"put.jid={v!r}", "put", put_with(2, v), 'Arg "jid"')
      for v in ["", "a:b", "a b", "x" * 65, "x-history", "x-dependents", "x-dependencies",
                "\u00e9", "a\x01b", "a/b", "{a}"]],
    case("put.jid=recurring-child", "put", put_with(2, "rec-7"), "collides with recurring"),
    *[case(f"put.queue={v!r}", "put", put_with(1, v), 'Arg "queue"')
      for v in ["", "a:b", "<script>", "q" * 65, "a/b", "{a}", "a b", "\u00e9"]],
    *[case(f"put.worker={v!r}", "put", put_with(0, v), 'Arg "worker"')
      for v in ["a b", "a:b", "w" * 129, "a\x01"]],
    *[case(f"put.klass={v[:8]!r}", "put", put_with(3, v), 'Arg "klass"')
      for v in ["", "k" * 257, "a\x01b"]],
    # put: JSON arguments
    *[case(f"put.data={v[:10]!r}", "put", put_with(4, v), 'Arg "data"')
      for v in ["{bad", '"str"', "[1]", "null", "1", "[]", '{"x":"' + "a" * (1 << 20) + '"}']],
    *[case(f"put.tags={v[:12]!r}", "put", put_with(5, 0, "tags", v), 'Arg "tags"')
      for v in ["{bad", '"x"', "[1]", '[""]', json.dumps(["t" * 65]), '{"a":1}', '[["x"]]',
                json.dumps(["a\x01b"]),
                json.dumps([f"t{n}" for n in range(51)])]],
    *[case(f"put.depends={v[:12]!r}", "put", put_with(5, 0, "depends", v), 'Arg "depends"')
      for v in ["{bad", '"x"', "[1]", '["new"]', '{"a":"b"}',
                json.dumps([f"j{n}" for n in range(1001)])]],
    *[case(f"put.throttles={v[:12]!r}", "put", put_with(5, 0, "throttles", v),
           'Arg "throttles"')
      for v in ["{bad", "[1]", '[""]', json.dumps([f"t{n}" for n in range(11)])]],
    case("put.data=deep", "put", put_with(4, '{"a":' * 1001 + "1" + "}" * 1001), 'Arg "data"'),
    case("put.jid=NUL", "put", put_with(2, "a\x00b"), 'Arg "jid"'),
    case("put.queue=NUL", "put", put_with(1, "a\x00b"), 'Arg "queue"'),
    case("put.worker=NUL", "put", put_with(0, "a\x00b"), 'Arg "worker"'),
    case("put.odd-pairs", "put", put_with(5, 0, "priority"), "[Oo]dd|Put\\(\\)"),
    case("put.reput-bad-tags", "put", ["worker", "queue", "waiting", "klass", "{}", 0, "tags",
                                       "{bad"], 'Arg "tags"'),
    case("put.reput-bad-priority", "put", ["worker", "queue", "waiting", "klass", "{}", 0,
                                           "priority", "x"], 'Arg "priority"'),
    case("requeue.missing", "requeue", put_with(2, "nope"), "does not exist"),
    # pop / peek / reserve
    *numeric("pop.count", "pop", lambda v: ["queue", "worker", v], 'Arg "count"'),
    *[case(f"pop.count={v}", "pop", ["queue", "worker", v], 'Arg "count"')
      for v in [0, -1, 1001, 1.5]],
    *[case(f"pop.worker={v!r}", "pop", ["queue", v, 1], 'Arg "worker"')
      for v in ["", "a b", "a:b"]],
    *[case(f"pop.queue={v!r}", "pop", [v, "worker", 1], 'Arg "queue"') for v in ["", "a:b"]],
    *numeric("peek.count", "peek", lambda v: ["queue", v], 'Arg "count"'),
    *numeric("peek.offset", "peek", lambda v: ["queue", 1, v], 'Arg "offset"'),
    *[case(f"peek.count={v}", "peek", ["queue", v], 'Arg "count"') for v in [-1, 501, 1.5]],
    *[case(f"peek.offset={v}", "peek", ["queue", 1, v], 'Arg "offset"') for v in [-1, 1.5]],
    *numeric("reserve.count", "reserve", lambda v: ["worker", v, "queue"], 'Arg "count"'),
    *[case(f"reserve.count={v}", "reserve", ["worker", v, "queue"], 'Arg "count"')
      for v in [0, 1001]],
    case("reserve.worker", "reserve", ["a:b", 1, "queue"], 'Arg "worker"'),
    case("reserve.queue", "reserve", ["worker", 1, "a:b"], 'Arg "queue"'),
    case("reserve.101-queues", "reserve", ["worker", 1, *[f"q{n}" for n in range(101)]], "100"),
    # queries with paging
    *numeric("jobs.offset", "jobs", lambda v: ["running", "queue", v, 5], 'Arg "offset"'),
    *numeric("jobs.count", "jobs", lambda v: ["running", "queue", 0, v], 'Arg "count"'),
    case("jobs.count=501", "jobs", ["running", "queue", 0, 501], 'Arg "count"'),
    case("jobs.offset=-1", "jobs", ["running", "queue", -1, 5], 'Arg "offset"'),
    case("jobs.state", "jobs", ["bogus", "queue"], 'Unknown type "bogus"'),
    *numeric("tag.get.offset", "tag", lambda v: ["get", "t1", v, 5], 'Arg "offset"'),
    *numeric("tag.get.count", "tag", lambda v: ["get", "t1", 0, v], 'Arg "count"'),
    case("tag.get.count=501", "tag", ["get", "t1", 0, 501], 'Arg "count"'),
    *numeric("tag.top.offset", "tag", lambda v: ["top", v, 5], 'Arg "offset"'),
    *numeric("failed.start", "failed", lambda v: ["grp", v, 5], 'Arg "(start|offset)"'),
    *numeric("failed.limit", "failed", lambda v: ["grp", 0, v], 'Arg "(limit|count)"'),
    case("failed.limit=501", "failed", ["grp", 0, 501], 'Arg "(limit|count)"'),
    *numeric("stats.date", "stats", lambda v: ["queue", v], 'Arg "date"'),
    # unfail
    *numeric("unfail.count", "unfail", lambda v: ["queue", "grp", v], 'Arg "count"'),
    case("unfail.count=501", "unfail", ["queue", "grp", 501], 'Arg "count"'),
    case("unfail.queue", "unfail", ["a:b", "grp", 5], 'Arg "queue"'),
    # complete
    case("complete.data=[1]", "complete", ["run", "worker", "queue", "[1]"], 'Arg "data"'),
    case("complete.data={bad", "complete", ["run", "worker", "queue", "{bad"], 'Arg "data"'),
    case("complete.next=a:b", "complete", ["run", "worker", "queue", "{}", "next", "a:b"],
         'Arg "(next|queue)"'),
    *numeric("complete.delay", "complete",
             lambda v: ["run", "worker", "queue", "{}", "next", "q2", "delay", v],
             'Arg "delay"'),
    case("complete.delay=-1", "complete",
         ["run", "worker", "queue", "{}", "next", "q2", "delay", -1], 'Arg "delay"'),
    case("complete.depends={bad", "complete",
         ["run", "worker", "queue", "{}", "next", "q2", "depends", "{bad"], 'Arg "depends"'),
    case("complete.delay-without-next", "complete", ["run", "worker", "queue", "{}", "delay", 5],
         "without a \"next\""),
    case("complete.twice", "complete", ["done", "worker", "queue", "{}"],
         "not currently running: complete"),
    case("complete.depends-without-next", "complete",
         ["run", "worker", "queue", "{}", "depends", "[]"], "without a \"next\""),
    case("complete.not-running", "complete", ["waiting", "worker", "queue", "{}"],
         "not currently running: waiting"),
    case("complete.other-worker", "complete", ["run", "thief", "queue", "{}"], "another worker"),
    case("complete.other-queue", "complete", ["run", "worker", "q2", "{}"], "another queue"),
    case("complete.missing", "complete", ["nope", "worker", "queue", "{}"], "does not exist"),
    *numeric("complete.reserve.count", "complete.reserve",
             lambda v: ["run", "worker", "queue", "{}", "", v, "queue"], 'Arg "count"'),
    case("complete.reserve.other-worker", "complete.reserve",
         ["run", "thief", "queue", "{}", "", 1, "queue"], "another worker"),
    *[case(f"complete.reserve.token={t[:8]!r}", "complete.reserve",
           ["run", "worker", "queue", "{}", t, 1, "queue"], 'Arg "token"')
      for t in ["a b", "x" * 65, "tok:en", "é"]],
    *[case(f"complete.token={t[:8]!r}", "complete",
           ["run", "worker", "queue", "{}", "token", t], 'Arg "token"')
      for t in ["a b", "x" * 65]],
    case("fail.token", "fail", ["run", "worker", "g", "m", "{}", "bad token"], 'Arg "token"'),
    case("retry.token", "retry", ["run", "queue", "worker", 0, "", "", "bad token"],
         'Arg "token"'),
    # fail
    *[case(f"fail.group={v[:4]!r}", "fail", ["run", "worker", v, "msg"], 'Arg "group"')
      for v in ["", "g" * 257]],
    case("fail.data=[1]", "fail", ["run", "worker", "grp", "msg", "[1]"], 'Arg "data"'),
    case("fail.other-worker", "fail", ["run", "thief", "grp", "msg"], "another worker"),
    case("fail.not-running", "fail", ["waiting", "worker", "grp", "msg"], "not currently running"),
    # retry
    *numeric("retry.delay", "retry", lambda v: ["run", "queue", "worker", v], 'Arg "delay"'),
    case("retry.delay=-1", "retry", ["run", "queue", "worker", -1], 'Arg "delay"'),
    case("retry.other-queue", "retry", ["run", "q2", "worker"], "Retry\\(\\)"),
    case("retry.other-worker", "retry", ["run", "queue", "thief"], "another worker"),
    # heartbeat
    case("heartbeat.worker=''", "heartbeat", ["run", ""], 'Arg "worker"'),
    case("heartbeat.data=[1]", "heartbeat", ["run", "worker", "[1]"], 'Arg "data"'),
    case("heartbeat.data={bad", "heartbeat", ["run", "worker", "{bad"], 'Arg "data"'),
    case("heartbeat.missing", "heartbeat", ["nope", "worker"], "does not exist"),
    case("heartbeat.failed", "heartbeat", ["bad", "worker"], "not currently running: failed"),
    case("heartbeat.complete", "heartbeat", ["done", "worker"],
         "not currently running: complete"),
    case("heartbeat.other-worker", "heartbeat", ["run", "thief"], "another worker"),
    case("heartbeat.not-running", "heartbeat", ["waiting", "worker"], "not currently running"),
    # priority
    *numeric("priority", "priority", lambda v: ["waiting", v], 'Arg "priority"'),
    *[case(f"priority={v}", "priority", ["waiting", v], 'Arg "priority"')
      for v in [1.5, 2147483648]],
    case("priority.missing", "priority", ["nope", 1], "does not exist"),
    # timeout / cancel / multiget / depends / tag / log / track
    case("timeout.partly-bad", "timeout", ["run", "nope"], "does not exist"),
    case("timeout.not-running", "timeout", ["run", "waiting"], "not running"),
    case("cancel.dependency", "cancel", ["waiting"], "is a dependency of dep"),
    case("cancel.1001", "cancel", [f"j{n}" for n in range(1001)], "1000"),
    case("multiget.1001", "multiget", [f"j{n}" for n in range(1001)], "1000"),
    case("timeout.1001", "timeout", [f"j{n}" for n in range(1001)], "1000|does not exist"),
    case("depends.command", "depends", ["dep", "sideways", "waiting"], '"on" or "off"'),
    case("depends.not-depends", "depends", ["waiting", "on", "run"], "not in the depends state"),
    case("tag.missing-job", "tag", ["add", "nope", "x"], "does not exist"),
    case("tag.subcommand", "tag", ["frob"], "First argument must be"),
    *[case(f"tag.add={v[:4]!r}", "tag", ["add", "waiting", v], 'Arg "tags?"')
      for v in ["", "t" * 65]],
    case("log.missing-job", "log", ["nope", "msg"], "does not exist"),
    case("log.data=[1]", "log", ["waiting", "msg", "[1]"], "Log\\(\\)"),
    case("track.missing-job", "track", ["track", "nope"], "does not exist"),
    case("track.action", "track", ["follow", "waiting"], "Unknown action"),
    # recur
    *numeric("recur.interval", "recur", lambda v: recur_with(5, v), 'Arg "interval"'),
    *[case(f"recur.interval={v}", "recur", recur_with(5, v), 'Arg "interval"')
      for v in [0, -1, 0.5, 31536001]],
    *numeric("recur.offset", "recur", lambda v: recur_with(6, v), 'Arg "offset"'),
    case("recur.offset=-1", "recur", recur_with(6, -1), 'Arg "offset"'),
    *numeric("recur.backlog", "recur", lambda v: recur_with(6, 0, "backlog", v),
             'Arg "backlog"'),
    *[case(f"recur.backlog={v}", "recur", recur_with(6, 0, "backlog", v), 'Arg "backlog"')
      for v in [-1, 1.5]],
    *numeric("recur.priority", "recur", lambda v: recur_with(6, 0, "priority", v),
             'Arg "priority"'),
    *numeric("recur.retries", "recur", lambda v: recur_with(6, 0, "retries", v),
             'Arg "retries"'),
    case("recur.retries=-1", "recur", recur_with(6, 0, "retries", -1), 'Arg "retries"'),
    case("recur.type", "recur", recur_with(4, "cron"), 'schedule type "cron" unknown'),
    case("recur.jid=49", "recur", recur_with(1, "r" * 49), 'Arg "jid"'),
    case("recur.jid=a:b", "recur", recur_with(1, "a:b"), 'Arg "jid"'),
    case("recur.queue", "recur", recur_with(0, "a:b"), 'Arg "queue"'),
    case("recur.data=[1]", "recur", recur_with(3, "[1]"), 'Arg "data"'),
    case("recur.tags=[1]", "recur", recur_with(6, 0, "tags", "[1]"), 'Arg "tags"'),
    case("recur.odd-pairs", "recur", recur_with(6, 0, "priority"), "[Oo]dd|Recur\\(\\)"),
    case("recur.existing-bad-backlog", "recur",
         ["queue", "rec", "klass", "{}", "interval", 60, 0, "backlog", -1], 'Arg "backlog"'),
    # recur.update
    *numeric("recur.update.interval", "recur.update", lambda v: ["rec", "interval", v],
             'Arg "interval"'),
    *numeric("recur.update.priority", "recur.update", lambda v: ["rec", "priority", v],
             'Arg "priority"'),
    *numeric("recur.update.retries", "recur.update", lambda v: ["rec", "retries", v],
             'Arg "retries"'),
    *numeric("recur.update.backlog", "recur.update", lambda v: ["rec", "backlog", v],
             'Arg "backlog"'),
    case("recur.update.interval=0", "recur.update", ["rec", "interval", 0], 'Arg "interval"'),
    case("recur.update.data=[1]", "recur.update", ["rec", "data", "[1]"], 'Arg "data"'),
    case("recur.update.queue", "recur.update", ["rec", "queue", "a:b"], 'Arg "queue"'),
    case("recur.update.tags", "recur.update", ["rec", "tags", "[]"], "Unrecognized option"),
    case("recur.update.no-value", "recur.update", ["rec", "priority"], "No value provided"),
    case("recur.update.missing", "recur.update", ["nope", "priority", 1], "No recurring job"),
    case("recur.update.partly-bad", "recur.update", ["rec", "priority", 3, "interval", 0],
         'Arg "interval"'),
    case("recur.tag.missing", "recur.tag", ["nope", "t"], "does not exist"),
    # config
    *[row for key in ("heartbeat", "grace-period", "jobs-history", "jobs-history-count",
                      "max-job-history", "queue-heartbeat", "queue-max-concurrency",
                      "max-worker-age")
      for row in numeric(f"config.{key}", "config.set", lambda v, k=key: [k, v],
                         "config\\.set\\(\\)")],
    case("config.heartbeat=0", "config.set", ["heartbeat", 0], "config\\.set\\(\\)"),
    case("config.max-job-history=2", "config.set", ["max-job-history", 2], "config\\.set\\(\\)"),
    # throttles
    *numeric("throttle.max", "throttle.set", lambda v: ["tid", v], 'Arg "max(imum)?"'),
    *numeric("throttle.ttl", "throttle.set", lambda v: ["tid", 1, v], 'Arg "ttl"'),
    case("throttle.max=-1", "throttle.set", ["tid", -1], 'Arg "max(imum)?"'),
    case("throttle.max=1.5", "throttle.set", ["tid", 1.5], 'Arg "max(imum)?"'),
    case("throttle.ttl=-1", "throttle.set", ["tid", 1, -1], 'Arg "ttl"'),
    case("queue.throttle.max=-1", "queue.throttle.set", ["queue", -1], 'Arg "max(imum)?"'),
]


def populate(lua: Any) -> None:
    """Build one job in every state, a recurring job, config and a throttle."""
    lua("config.set", 0, "grace-period", 15)
    lua("throttle.set", 0, "tid", 2)
    lua("put", 0, "worker", "queue", "run", "klass", '{"a": []}', 0, "tags", ["t1"])
    assert lua.json("pop", 0, "queue", "worker", 1)[0]["jid"] == "run"
    lua("put", 1, "worker", "queue", "bad", "klass", "{}", 0)
    lua("pop", 1, "queue", "worker", 1)
    lua("fail", 1, "bad", "worker", "grp", "msg")
    lua("put", 2, "worker", "queue", "done", "klass", "{}", 0)
    lua("pop", 2, "queue", "worker", 1)
    lua("complete", 2, "done", "worker", "queue", "{}")
    lua("put", 3, "worker", "queue", "waiting", "klass", "{}", 0, "tags", ["t1", "t2"],
        "priority", 2)
    lua("put", 3, "worker", "queue", "sched", "klass", "{}", 100)
    lua("put", 3, "worker", "queue", "dep", "klass", "{}", 0, "depends", ["waiting"])
    lua("track", 3, "track", "waiting")
    lua("recur", 4, "queue", "rec", "klass", "{}", "interval", 60, 1000, "tags", ["t3"])


# The populated database, built through the engine once per session and restored by DUMP
# payload for every other test (hundreds of rows; rebuilding it each time dominated the run).
BUILT: dict[str, dict[str, bytes]] = {}


@pytest.fixture
def populated(lua: Any, r: redis.Redis, redis_url: str) -> Any:
    """A database holding one job in every state, a recurring job, config and a throttle."""
    dump = BUILT.get(redis_url)
    if dump is None:
        populate(lua)
        BUILT[redis_url] = snapshot(r)
    else:
        pipe = r.pipeline(transaction=False)
        for key, value in dump.items():
            pipe.restore(key, 0, value)
        pipe.execute()
    return lua


@pytest.mark.parametrize("command,args,match", CASES)
def test_refused_without_writes(populated: Any, r: redis.Redis, command: str, args: list[Any],
                                match: str) -> None:
    """Raise a clear error and change nothing."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=match):
        if command == "@now":
            populated.script(keys=[], args=[args[0], args[1], *PUT])
        else:
            populated(command, NOW, *args)
    assert snapshot(r) == before


@pytest.mark.parametrize("key", [
    "ql:x", "ql:", "ql:{}:", "ql:{a b}:", "ql:{s1}", "{s1}:", "ql:{s1}:j:", "ql:{é}:",
    "ql:{" + "a" * 33 + "}:", "ql:{s1}:\n",
])
def test_bad_keyspace_is_refused(populated: Any, r: redis.Redis, key: str) -> None:
    """Refuse a key that is not a shard prefix ql:{<tag>}:, before any write."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="must look like ql:{<tag>}:"):
        populated.script(keys=[key], args=["put", NOW, *PUT])
    assert snapshot(r) == before


def test_more_than_one_key_is_refused(populated: Any, r: redis.Redis) -> None:
    """Refuse two keys, even two valid prefixes."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="Only one key may be provided"):
        populated.script(keys=["ql:{a}:", "ql:{a}:"], args=["put", NOW, *PUT])
    assert snapshot(r) == before


def test_empty_argv_is_refused(populated: Any, r: redis.Redis) -> None:
    """Refuse a call without a command."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="Must provide a command"):
        populated.script(keys=[], args=[])
    assert snapshot(r) == before


def test_missing_now_is_refused(populated: Any, r: redis.Redis) -> None:
    """Refuse a command without `now`."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError):
        populated.script(keys=[], args=["put"])
    assert snapshot(r) == before



def ok(ident: str, command: str, args: list[Any]) -> Any:
    """One row of the accepted-boundaries table."""
    return pytest.param(command, args, id=ident)


ACCEPTED: list[Any] = [
    ok("put.delay=10y", "put", put_with(5, 315360000)),
    ok("put.delay=0.5", "put", put_with(5, 0.5)),
    ok("put.priority=2^31-1", "put", put_with(5, 0, "priority", 2147483647)),
    ok("put.priority=-2^31", "put", put_with(5, 0, "priority", -2147483648)),
    ok("put.retries=0", "put", put_with(5, 0, "retries", 0)),
    ok("put.retries=1000", "put", put_with(5, 0, "retries", 1000)),
    ok("put.jid=64", "put", put_with(2, "j" * 64)),
    ok("put.jid=charset", "put", put_with(2, "Az09_.-x")),
    ok("put.queue=64", "put", put_with(1, "q" * 64)),
    ok("put.worker=128", "put", put_with(0, "w" * 128)),
    ok("put.klass=256", "put", put_with(3, "k" * 256)),
    ok("put.klass=dotted", "put", put_with(3, "app.jobs.Thing")),
    ok("put.data=1MiB-ish", "put", put_with(4, '{"x":"' + "a" * ((1 << 20) - 16) + '"}')),
    ok("put.tags=50x64", "put", put_with(5, 0, "tags", json.dumps(
        [f"{n:02d}" + "t" * 62 for n in range(50)]))),
    ok("put.depends=1000", "put", put_with(5, 0, "depends", json.dumps(
        [f"j{n}" for n in range(1000)]))),
    ok("put.depends=[]", "put", put_with(5, 0, "depends", "[]")),
    ok("put.tags=[]", "put", put_with(5, 0, "tags", "[]")),
    ok("pop.count=1000", "pop", ["queue", "worker", 1000]),
    ok("peek.count=500", "peek", ["queue", 500]),
    ok("peek.count=0", "peek", ["queue", 0]),
    ok("jobs.count=0", "jobs", ["running", "queue", 0, 0]),
    ok("jobs.count=500", "jobs", ["running", "queue", 0, 500]),
    ok("failed.limit=500", "failed", ["grp", 0, 500]),
    ok("tag.get.count=500", "tag", ["get", "t1", 0, 500]),
    ok("unfail.count=500", "unfail", ["queue", "grp", 500]),
    ok("recur.jid=48", "recur", recur_with(1, "r" * 48)),
    ok("recur.interval=1", "recur", recur_with(5, 1)),
    ok("recur.interval=1y", "recur", recur_with(5, 31536000)),
    ok("recur.backlog=0", "recur", recur_with(6, 0, "backlog", 0)),
    ok("fail.group=256", "fail", ["run", "worker", "g" * 256, "msg"]),
    ok("retry.delay=0", "retry", ["run", "queue", "worker", 0]),
    ok("cancel.1000", "cancel", [f"j{n}" for n in range(1000)]),
    ok("multiget.1000", "multiget", [f"j{n}" for n in range(1000)]),
    ok("reserve.20-queues", "reserve", ["worker", 1, *[f"q{n}" for n in range(20)]]),
    ok("throttle.max=0", "throttle.set", ["tid", 0]),
    ok("stats.date=fraction", "stats", ["queue", 1700000000.5]),
]


@pytest.mark.parametrize("command,args", ACCEPTED)
def test_accepted_boundaries(populated: Any, command: str, args: list[Any]) -> None:
    """Values at the edge of every documented limit are accepted."""
    populated(command, NOW, *args)


@pytest.mark.parametrize("command", ["pause", "unpause", "queue.forget", "worker.deregister",
                                     "get", "recur.get", "unrecur", "length", "stats", "put",
                                     "pop", "peek", "complete", "fail", "retry", "heartbeat",
                                     "priority", "log", "depends", "recur", "recur.update",
                                     "unfail", "config.set", "throttle.set"])
def test_missing_arguments(populated: Any, r: redis.Redis, command: str) -> None:
    """A command called without its arguments errors and writes nothing."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError):
        populated(command, NOW)
    assert snapshot(r) == before


# The exact wording docs/engine.md gives for its validation rules.
WORDING: list[Any] = [
    case("priority-range", "put", put_with(5, 0, "priority", 1.5),
         r'Put\(\): Arg "priority" must be an integer in \[-2147483648, 2147483647\]: 1.5'),
    case("delay-negative", "put", put_with(5, -5), r'Put\(\): Arg "delay" must be >= 0: -5'),
    case("delay-too-far", "put", put_with(5, 315360001),
         r'Arg "delay" must be at most 315360000: 315360001'),
    case("delay-not-number", "put", put_with(5, "x"), r'Put\(\): Arg "delay" not a number: x'),
    case("delay-not-finite", "put", put_with(5, "1e309"),
         r'Arg "delay" (must be finite|not a number): 1e309'),
    case("retries-range", "put", put_with(5, 0, "retries", 1001),
         r'Arg "retries" must be an integer in \[0, 1000\]: 1001'),
    case("pop-count-range", "pop", ["queue", "worker", 0],
         r'Pop\(\): Arg "count" must be an integer in \[1, 1000\]: 0'),
    case("peek-count-range", "peek", ["queue", 501],
         r'Peek\(\): Arg "count" must be an integer in \[0, 500\]: 501'),
    case("jobs-offset", "jobs", ["running", "queue", -1],
         r'Jobs\(\): Arg "offset" must be a non-negative integer: -1'),
    case("jid-invalid", "put", put_with(2, "a:b"), r'Put\(\): Arg "jid" invalid: a:b'),
    case("queue-invalid", "put", put_with(1, "a:b"), r'Put\(\): Arg "queue" invalid: a:b'),
    case("worker-invalid", "pop", ["queue", "a b", 1], r'Pop\(\): Arg "worker" invalid: a b'),
    case("klass-invalid", "put", put_with(3, ""), r'Put\(\): Arg "klass" (invalid|missing)'),
    case("data-not-json", "put", put_with(4, "{bad"), r'Put\(\): Arg "data" not JSON'),
    case("data-not-object", "put", put_with(4, "[1]"),
         r'Put\(\): Arg "data" must be a JSON object'),
    case("data-too-large", "put", put_with(4, '{"x":"' + "a" * (1 << 20) + '"}'),
         r'Put\(\): Arg "data" too large'),
    case("cancel-too-many", "cancel", [f"j{n}" for n in range(1001)], r"at most 1000 jids"),
    case("now", "put", PUT, r'Arg "now" missing or not a number: nan'),
]


@pytest.mark.parametrize("command,args,match", WORDING)
def test_error_wording(populated: Any, r: redis.Redis, command: str, args: list[Any],
                       match: str) -> None:
    """Use the messages docs/engine.md spells out."""
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=match):
        populated(command, "nan" if match.startswith('Arg "now"') else NOW, *args)
    assert snapshot(r) == before


# -- random operation sequences ------------------------------------------------------------------


SEEDS = [int(s) for s in os.environ.get("QLESS_FUZZ_SEEDS", "1,2,3").split(",")]


class Fuzz:
    """Drive the engine with a seeded mix of valid and invalid calls."""

    def __init__(self, lua: Any, r: redis.Redis, seed: int) -> None:
        self.lua, self.r = lua, r
        self.rng = random.Random(seed)
        self.now = 1700000000.0
        self.jids = [f"j{n}" for n in range(12)]
        self.workers = ["w1", "w2", "w3"]
        self.queues = ["qa", "qb"]
        self.refused = 0

    def pick(self, seq: list[Any]) -> Any:
        """Choose one element."""
        return self.rng.choice(seq)

    def job(self, jid: str) -> dict[str, str]:
        """Read a job hash."""
        return dict(self.r.hgetall(f"ql:j:{jid}"))

    def call(self) -> list[Any]:
        """Choose one call (command and arguments), often invalid on purpose."""
        rng, jid, worker = self.rng, self.pick(self.jids), self.pick(self.workers)
        queue = self.pick(self.queues)
        h = self.job(jid)
        owner = h.get("worker") or worker
        hq = h.get("queue") or queue
        kind = rng.randrange(20)
        if kind == 0:
            pairs: list[Any] = ["priority", rng.randint(-2, 2)]
            if rng.random() < 0.3:
                pairs += ["depends", json.dumps(rng.sample(self.jids, 2))]
            if rng.random() < 0.3:
                pairs += ["tags", json.dumps(rng.sample(["x", "y", "z"], 2))]
            if rng.random() < 0.2:
                pairs += ["throttles", json.dumps(["th"])]
            return ["put", worker, queue, jid, "K", "{}", self.pick([0, 0, 15]), *pairs]
        if kind in (1, 2):
            return ["pop", queue, worker, rng.randint(1, 3)]
        if kind == 3:
            extra = ["next", self.pick(self.queues)] if rng.random() < 0.3 else []
            return ["complete", jid, owner, hq, "{}", *extra]
        if kind == 4:
            return ["fail", jid, owner, self.pick(["g1", "g2"]), "boom"]
        if kind == 5:
            return ["retry", jid, hq, owner, self.pick([0, 0, 20])]
        if kind == 6:
            return ["heartbeat", jid, owner]
        if kind == 7:
            return ["timeout", jid]
        if kind == 8:
            return ["cancel", *rng.sample(self.jids, rng.randint(1, 3))]
        if kind == 9:
            return ["depends", jid, "off", "all"]
        if kind == 10:
            return ["unfail", queue, self.pick(["g1", "g2", "failed-retries-qa"]), 2]
        if kind == 11:
            return ["tag", self.pick(["add", "remove"]), jid, self.pick(["x", "y"])]
        if kind == 12:
            return ["recur", queue, "rec", "K", "{}", "interval", 30, 0, "backlog", 2]
        if kind == 13:
            return ["throttle.set", "th", rng.randint(0, 2)]
        if kind == 14:
            return [self.pick(["pause", "unpause"]), queue]
        if kind == 15:
            return ["reserve", worker, rng.randint(1, 3), *rng.sample(self.queues, 2)]
        if kind == 16:
            return ["complete.reserve", jid, owner, hq, "{}", "", rng.randint(0, 2), queue]
        if kind == 17:
            return ["recur.update", "rec", self.pick(["queue", "interval", "priority"]),
                    self.pick([queue, 10, 1])]
        if kind == 18:
            calls = [["track", "track", jid], ["depends", jid, "on", self.pick(self.jids)]]
            # `priority` re-scores any jid in the work set, a stalled one (+inf) included; the core
            # auditor's `stalled.score` rule objects to that, so leave stalled jobs alone here.
            if h.get("state") != "stalled":
                calls.append(["priority", jid, rng.randint(-3, 3)])
            return self.pick(calls)
        # Plainly invalid calls mixed in.
        return self.pick([["put", worker, queue, jid, "K", "[1]", 0], ["pop", queue, worker, 0],
                          ["priority", jid, "nan"], ["retry", jid, hq, owner, -1]])

    def step(self) -> None:
        """Advance the clock and run one call; a refused call must change nothing."""
        # Mostly forward; sometimes a client whose clock is a little behind.
        self.now += self.pick([0, 0.5, 1, 5, 30, 70, -0.25])
        args = self.call()
        before = snapshot(self.r)
        try:
            self.lua(args[0], self.now, *args[1:])
        except redis.ResponseError:
            self.refused += 1
            assert snapshot(self.r) == before, args


@pytest.mark.parametrize("seed", SEEDS)
def test_random_sequences_keep_indexes_consistent(lua: Any, r: redis.Redis, seed: int) -> None:
    """Random valid and invalid calls never leave an index the auditor objects to."""
    lua("config.set", 0, "heartbeat", 20)
    lua("config.set", 0, "grace-period", 5)
    fuzz = Fuzz(lua, r, seed)
    for n in range(300):
        fuzz.step()
        if n % 50 == 49:
            report = audit(r)
            assert report.ok, str(report)
    assert fuzz.refused > 20
