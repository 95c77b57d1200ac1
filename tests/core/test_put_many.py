"""`put.many` (engine extension) and `Queue.put_many`: many puts in one call, all or nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument, QlessError
from django_qless.core.queue import Queue
from tests.core import keyspace_mode
from tests.core.conftest import FakeClock, Lua, snapshot
from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

NOW = 1000.0
STEP = 1e-6

# (jid, klass, data, delay, options): new jobs, re-puts of jobs in every state (see _setup),
# a dependency on an earlier job of the call, scheduled, throttled, tagged, tracked.
JOBS: list[tuple[str, str, dict[str, Any], float, dict[str, Any]]] = [
    ("n1", "K", {"i": 1}, 0, {}),
    ("n2", "K", {"i": 2}, 0, {"priority": 3, "tags": ["x", "z"], "retries": 2}),
    ("n3", "K", {}, 30, {"tags": ["x"]}),
    ("n4", "K", {}, 0, {"depends": ["n1", "dep0", "missing"]}),
    ("n5", "K", {}, 10, {"depends": ["n4"]}),
    ("thA", "K", {}, 0, {"throttles": ["t"]}),
    ("thB", "K", {}, 0, {"throttles": ["t"], "priority": -1}),
    ("run1", "K2", {"moved": True}, 0, {"tags": ["y"], "depends": []}),
    ("done1", "K", {}, 5, {}),
    ("fail1", "K", {}, 0, {"tags": [], "throttles": []}),
    ("dep0", "K", {"again": 1}, 0, {"depends": ["n2"]}),
    ("n6", "K", {"long": "v" * 200}, 0, {"throttles": ["u", "t"], "retries": 0}),
]


def flat(opts: dict[str, Any]) -> list[Any]:
    """Options as put's trailing name/value pairs (lists as JSON)."""
    out: list[Any] = []
    for name, value in opts.items():
        out += [name, json.dumps(value) if isinstance(value, list) else value]
    return out


def many_args(jobs: Sequence[tuple[str, str, dict[str, Any], float, dict[str, Any]]],
              worker: str = "w1", queue: str = "q") -> list[Any]:
    """put.many's arguments after `now`."""
    args: list[Any] = [worker, queue, len(jobs)]
    for jid, klass, data, delay, opts in jobs:
        pairs = flat(opts)
        args += [jid, klass, json.dumps(data), delay, len(pairs) // 2, *pairs]
    return args


def _setup(lua: Lua) -> None:
    """Jobs in every state: running (tracked), complete, failed, throttled, waiting."""
    lua("throttle.set", 1, "t", 1)
    lua("put", 1, "w0", "old", "run1", "K", {}, 0, "tags", '["x","y"]')
    lua("put", 2, "w0", "old", "done1", "K", {}, 0)
    lua("put", 3, "w0", "old", "fail1", "K", {}, 0, "tags", '["f"]')
    lua("put", 4, "w0", "old", "thA", "K", {}, 0, "throttles", '["t"]')
    lua("put", 5, "w0", "old", "thB", "K", {}, 0, "throttles", '["t"]')
    lua("put", 6, "w0", "old", "dep0", "K", {}, 0)
    lua("pop", 10, "old", "w0", 5)  # run1 done1 fail1 thA running, thB throttled
    lua("complete", 11, "done1", "w0", "old", "{}")
    lua("fail", 12, "fail1", "w0", "boom", "it broke")
    lua("track", 13, "track", "run1")


def _state(r: redis.Redis, drain: Callable[[], list[tuple[str, str]]]) -> Any:
    """Every key, and the events but wake-ups (put.many sends each queue's once per call).
    The engine's generation tag (`#marks` in ql:config, unique to each run) only as there."""
    events = drain()
    tagged = r.hdel("ql:config", "#marks")
    return (snapshot(r), [e for e in events if not e[0].startswith("ql:wake:")],
            sorted({e[0] for e in events if e[0].startswith("ql:wake:")}), tagged)


def test_same_keys_and_events_as_individual_puts(
    lua: Lua, r: redis.Redis, events: Callable[[], list[tuple[str, str]]]
) -> None:
    _setup(lua)
    events()
    assert lua.json("put.many", NOW, *many_args(JOBS)) == [job[0] for job in JOBS]
    many = _state(r, events)
    got = {jid: lua.json("get", 0, jid) for jid, *_ in JOBS}
    r.flushdb()
    _setup(lua)
    events()
    for i, (jid, klass, data, delay, opts) in enumerate(JOBS):
        lua("put", NOW + i * STEP, "w1", "q", jid, klass, data, delay, *flat(opts))
    single = _state(r, events)
    assert many == single
    assert got == {jid: lua.json("get", 0, jid) for jid, *_ in JOBS}
    # what the comparison covers
    assert got["n4"]["state"] == "depends" and sorted(got["n4"]["dependencies"]) == ["dep0", "n1"]
    assert got["n5"]["state"] == "depends" and got["n3"]["state"] == "scheduled"
    assert got["run1"]["queue"] == "q" and got["run1"]["klass"] == "K2"
    assert [e["what"] for e in got["fail1"]["history"]] == ["put", "popped", "failed", "put"]
    assert ("ql:put", "run1") in many[1]
    assert ("ql:w:w0", json.dumps({"jid": "run1", "event": "lock_lost", "worker": "w0"},
                                  separators=(",", ":"))) in many[1]
    assert many[2] == ["ql:wake:old", "ql:wake:q"]  # thB, admitted when thA left "old"


def test_fifo_within_the_call_and_priority_first(lua: Lua, r: redis.Redis) -> None:
    jobs = [(f"j{i}", "K", {}, 0, {"priority": 2} if i % 10 == 3 else {}) for i in range(300)]
    lua("put.many", NOW, *many_args(jobs))
    order = r.zrevrange("ql:q:q-work", 0, -1)
    urgent = [f"j{i}" for i in range(300) if i % 10 == 3]
    assert sorted(order[:len(urgent)]) == sorted(urgent)
    assert order[len(urgent):] == [f"j{i}" for i in range(300) if i % 10 != 3]
    # (`time` is stored to the millisecond: the microsecond steps live in the scores)
    assert [r.hget(f"ql:j:j{i}", "time") for i in (0, 1, 299)] == ["1000", "1000", "1000"]


def hex_jid(i: int) -> str:
    """A jid as our client makes them (32 hex digits): put.many's plain put takes those."""
    return f"{i:032x}"


def many_and_single(lua: Lua, r: redis.Redis, events: Callable[[], list[tuple[str, str]]],
                    jobs: list[tuple[str, str, dict[str, Any], float, dict[str, Any]]],
                    setup: Callable[[], None]) -> tuple[Any, Any]:
    """The state (_state) after one put.many of `jobs`, then after one put each, both on a
    flushed database prepared by `setup`."""
    states = []
    for many in (True, False):
        r.flushdb()
        setup()
        events()
        if many:
            assert lua.json("put.many", NOW, *many_args(jobs)) == [job[0] for job in jobs]
        else:
            for i, (jid, klass, data, delay, opts) in enumerate(jobs):
                lua("put", NOW + i * STEP, "w1", "q", jid, klass, data, delay, *flat(opts))
        states.append(_state(r, events))
    return states[0], states[1]


@pytest.mark.parametrize("lean", [False, True], ids=["full-records", "lean-records"])
def test_plain_jobs_store_and_publish_what_individual_puts_do(
    lua: Lua, r: redis.Redis, events: Callable[[], list[tuple[str, str]]], lean: bool
) -> None:
    """New jobs with fresh jids, no delay and no options (the engine's plain put, which skips
    put's option and move handling) leave the keys and events of one put each, FIFO."""
    jobs = [(hex_jid(i), "K" if i % 3 else "K2", {"i": i, "s": "é"}, 0, {}) for i in range(40)]

    def setup() -> None:
        if lean:
            lua("config.set", 1, "lean-job-records", 1)
        lua("put", 2, "w0", "q", "other", "K", {}, 0)  # (the queue listed: as put.many's)

    many, single = many_and_single(lua, r, events, jobs, setup)
    assert many == single
    assert len(many[1]) == 40 and many[2] == ["ql:wake:q"]
    assert r.zrevrange("ql:q:q-work", 0, -1) == ["other"] + [job[0] for job in jobs]
    assert ("jid" in r.hgetall(f"ql:j:{hex_jid(7)}")) is (not lean and KEYSPACE is None)


def test_plain_call_looks_for_every_job_with_one_exists(lua: Lua, r: redis.Redis) -> None:
    """A plain call reads whether its jobs exist with one EXISTS, and writes one HSET and one
    log event each and one ZADD into the work set."""
    lua("put", NOW - 0.5, "w0", "q", "other", "K", {}, 0)  # (the queue listed lately)
    r.config_resetstat()
    lua("put.many", NOW, *many_args([(hex_jid(i), "K", {}, 0, {}) for i in range(50)]))
    stats = {name.removeprefix("cmdstat_"): row["calls"]
             for name, row in r.info("commandstats").items()}
    listed = 1 if lua.function is None else 0  # (under EVALSHA no memo of listed queues)
    assert (stats["exists"], stats["hset"], stats["zadd"]) == (1, 50, 1 + listed)
    assert stats.get("publish", 0) + stats.get("spublish", 0) == 51  # (and the wake-up)


def test_plain_call_with_an_existing_jid_puts_each_job_as_put(
    lua: Lua, r: redis.Redis, events: Callable[[], list[tuple[str, str]]]
) -> None:
    """A job of the call that exists (running here) is moved as put moves it: the call is
    put job by job, every job as before."""
    jobs = [(hex_jid(i), "K", {"i": i}, 0, {}) for i in range(5)]

    def setup() -> None:
        lua("put", 1, "w0", "old", hex_jid(3), "K", {}, 0)
        lua("pop", 2, "old", "w0", 1)

    many, single = many_and_single(lua, r, events, jobs, setup)
    assert many == single
    assert lua.json("get", 0, hex_jid(3))["queue"] == "q"
    assert any(e[0] == "ql:w:w0" and "lock_lost" in e[1] for e in many[1])


@pytest.mark.parametrize("field,value,message", [
    (2, "not json", 'Put(): job 2: Arg "data" not JSON'),
    (2, "[1]", 'Put(): job 2: Arg "data" must be a JSON object'),
    (1, "", 'Put(): job 2: Arg "klass" missing'),
    (1, "a\nb", 'Put(): job 2: Arg "klass" invalid'),
    (0, hex_jid(1), f'Put(): job 2: Arg "jid" invalid: {hex_jid(1)} repeats job 1 of this call'),
])
def test_bad_field_in_a_plain_call_refuses_it(
    lua: Lua, r: redis.Redis, field: int, value: str, message: str
) -> None:
    before = snapshot(r)
    args = many_args([(hex_jid(i), "K", {}, 0, {}) for i in (1, 2, 3)])
    args[3 + 5 + field] = value.replace("\\n", "\n")
    with pytest.raises(redis.ResponseError) as info:
        lua("put.many", NOW, *args)
    assert message in str(info.value)
    assert snapshot(r) == before


def test_options_tags_throttles_delay(lua: Lua, r: redis.Redis) -> None:
    jobs = [("a", "K", {}, 0, {"tags": ["x", "y", "x"]}),
            ("b", "K", {}, 0, {"tags": ["x"], "throttles": ["t1"]}),
            ("c", "K", {}, 60, {"retries": 7}),
            ("d", "K", {}, 0, {"depends": ["a", "c"]})]
    lua("put.many", NOW, *many_args(jobs))
    assert r.zrange("ql:tags", 0, -1, withscores=True) == [("y", 1.0), ("x", 2.0)]
    assert r.zrange("ql:t:x", 0, -1) == ["a", "b"]
    assert json.loads(r.hget("ql:j:b", "throttles")) == ["t1"]
    assert r.zrange("ql:q:q-scheduled", 0, -1, withscores=True) == [("c", NOW + 2 * STEP + 60)]
    assert r.hget("ql:j:c", "retries") == "7"
    assert r.smembers("ql:j:d-dependencies") == {"a", "c"}
    assert r.smembers("ql:j:a-dependents") == {"d"}
    assert r.zrange("ql:q:q-depends", 0, -1) == ["d"]
    assert r.zrevrange("ql:q:q-work", 0, -1) == ["a", "b"]
    assert r.zscore("ql:queues", "q") == NOW


BAD = [
    ({"priority": "high"}, 'Put(): job 3: Arg "priority" not a number: high'),
    ({"tags": "nope"}, 'Put(): job 3: Arg "tags" not JSON'),
    ({"depends": ["j3"]}, 'Put(): job 3: Arg "depends" invalid: a job cannot depend on itself'),
    ({"retries": -1}, 'Put(): job 3: Arg "retries" must be an integer in [0, 1000]: -1'),
    ({"throttles": ["bad id"]}, 'Put(): job 3: Arg "throttles" invalid throttle id: bad id'),
    ({"depends": ["j5"]}, 'Put(): job 3: Arg "depends" invalid: j5 is job 5 of this call, put '
                          'after this one'),
]


@pytest.mark.parametrize("opts,message", BAD)
def test_bad_option_in_one_job_refuses_the_call(
    lua: Lua, r: redis.Redis, opts: dict[str, Any], message: str
) -> None:
    lua("put", 1, "w1", "q", "j1", "K", {}, 0)
    before = snapshot(r)
    jobs = [(f"j{i}", "K", {}, 0, opts if i == 3 else {}) for i in range(1, 6)]
    with pytest.raises(redis.ResponseError) as info:
        lua("put.many", NOW, *many_args(jobs))
    assert message in str(info.value)
    assert snapshot(r) == before


@pytest.mark.parametrize("field,value,message", [
    (2, "not json", 'Put(): job 2: Arg "data" not JSON'),
    (2, "[1]", 'Put(): job 2: Arg "data" must be a JSON object'),
    (3, "-1", 'Put(): job 2: Arg "delay" must be >= 0: -1'),
    (1, "", 'Put(): job 2: Arg "klass" missing'),
    (0, "bad jid", 'Put(): job 2: Arg "jid" invalid: bad jid'),
    (0, "j1", 'Put(): job 2: Arg "jid" invalid: j1 repeats job 1 of this call'),
    (0, "rec-3", 'Put(): job 2: Job rec-3 collides with recurring job rec'),
    (4, "x", 'Put(): job 2: Arg "nopts" not a number: x'),
])
def test_bad_field_in_one_job_refuses_the_call(
    lua: Lua, r: redis.Redis, field: int, value: str, message: str
) -> None:
    lua("recur", 1, "q", "rec", "K", {}, "interval", 60, 0)
    before = snapshot(r)
    args = many_args([("j1", "K", {}, 0, {}), ("j2", "K", {}, 0, {}), ("j3", "K", {}, 0, {})])
    args[3 + 5 + field] = value
    with pytest.raises(redis.ResponseError) as info:
        lua("put.many", NOW, *args)
    assert message in str(info.value)
    assert snapshot(r) == before


@pytest.mark.parametrize("args,message", [
    (["w1", "q", 2, "a", "K", "{}", 0, 0], 'job 2 of 2 is incomplete'),
    (["w1", "q", 1, "a", "K", "{}", 0, 0, "b"], '1 left over after job 1'),
    (["w1", "q", 1, "a", "K", "{}", 0, 1, "priority"], 'job 1 of 1 is incomplete'),
    (["w1", "q", 1, "a", "K", "{}", 0, 0, "priority", 1], '2 left over after job 1'),
    (["w1", "q", 0], 'Arg "n" must be an integer in [1, 1000]: 0'),
    (["w1", "q", 1001], 'Arg "n" must be an integer in [1, 1000]: 1001'),
    (["w1", "q", "x"], 'Arg "n" not a number: x'),
    (["w1", "", 1, "a", "K", "{}", 0, 0], 'Put(): Arg "queue" missing'),
    (["a:b", "q", 1, "a", "K", "{}", 0, 0], 'Put(): Arg "worker" invalid: a:b'),
])
def test_argument_count_must_match_n(
    lua: Lua, r: redis.Redis, args: list[Any], message: str
) -> None:
    with pytest.raises(redis.ResponseError) as info:
        lua("put.many", NOW, *args)
    assert message in str(info.value)
    assert r.keys("*") == []


def test_repeat_moves_an_existing_job_like_put(lua: Lua, r: redis.Redis) -> None:
    lua("put", 1, "w0", "old", "a", "K", {}, 0, "priority", 4, "tags", '["t"]')
    lua("pop", 2, "old", "w0", 1)
    assert lua.json("put.many", NOW, *many_args([("a", "K", {"v": 2}, 0, {})])) == ["a"]
    job = lua.json("get", 0, "a")
    assert (job["queue"], job["state"], job["worker"], job["priority"], job["tags"]) == (
        "q", "waiting", "", 4, ["t"])
    assert [e["what"] for e in job["history"]] == ["put", "popped", "put"]
    assert r.zcard("ql:q:old-locks") == 0 and r.zcard("ql:w:w0:jobs") == 0


def test_dependency_on_a_later_job_that_exists_is_kept(lua: Lua, r: redis.Redis) -> None:
    lua("put", 1, "w1", "q", "b", "K", {}, 0)
    lua("put.many", NOW, *many_args([("a", "K", {}, 0, {"depends": ["b"]}),
                                     ("b", "K", {}, 0, {})]))
    assert r.hget("ql:j:a", "state") == "depends"
    assert r.smembers("ql:j:b-dependents") == {"a"}


def test_cycle_through_an_earlier_job_of_the_call_is_refused(lua: Lua, r: redis.Redis) -> None:
    """As two puts in a row: the second would close a -> b -> a."""
    lua("put", 1, "w1", "q", "a", "K", {}, 0)
    before = snapshot(r)
    jobs = [("b", "K", {}, 0, {"depends": ["a"]}), ("a", "K", {}, 0, {"depends": ["b"]})]
    with pytest.raises(redis.ResponseError) as info:
        lua("put.many", NOW, *many_args(jobs))
    assert 'Put(): job 2: Arg "depends" invalid: dependency cycle: a would wait for itself' in str(
        info.value)
    assert snapshot(r) == before
    lua("put", 2, "w1", "q", "b", "K", {}, 0, "depends", '["a"]')
    with pytest.raises(redis.ResponseError, match="dependency cycle: a would wait for itself"):
        lua("put", 3, "w1", "q", "a", "K", {}, 0, "depends", '["b"]')


def test_cycle_through_new_jobs_of_the_call_is_refused(lua: Lua, r: redis.Redis) -> None:
    """x -> b -> a -> x where a and b are new: the edges exist only once a and b are put."""
    lua("put", 1, "w1", "q", "x", "K", {}, 0)
    before = snapshot(r)
    jobs = [("a", "K", {}, 0, {"depends": ["x"]}), ("b", "K", {}, 0, {"depends": ["a"]}),
            ("x", "K", {}, 0, {"depends": ["b"]})]
    with pytest.raises(redis.ResponseError, match="job 3: Arg \"depends\" invalid: dependency "
                                                  "cycle: x would wait for itself"):
        lua("put.many", NOW, *many_args(jobs))
    assert snapshot(r) == before


def test_no_cycle_through_a_replaced_edge(lua: Lua, r: redis.Redis) -> None:
    """b -> a is dropped by the call's re-put of b, so a may then wait for b."""
    lua("put", 1, "w1", "q", "a", "K", {}, 0)
    lua("put", 2, "w1", "q", "c", "K", {}, 0)
    lua("put", 3, "w1", "q", "b", "K", {}, 0, "depends", '["a"]')
    jobs = [("b", "K", {}, 0, {"depends": ["c"]}), ("a", "K", {}, 0, {"depends": ["b"]})]
    assert lua.json("put.many", NOW, *many_args(jobs)) == ["b", "a"]
    assert r.smembers("ql:j:a-dependencies") == {"b"}
    assert r.smembers("ql:j:b-dependencies") == {"c"}


def test_no_cycle_through_an_edge_put_would_not_add(lua: Lua, r: redis.Redis) -> None:
    """b's dependency on the complete x adds no edge, so x may then wait for b (as with puts)."""
    lua("put", 1, "w1", "q", "x", "K", {}, 0)
    lua("pop", 2, "q", "w1", 1)
    lua("complete", 3, "x", "w1", "q", "{}")
    jobs = [("b", "K", {}, 0, {"depends": ["x"]}), ("x", "K", {}, 0, {"depends": ["b"]})]
    assert lua.json("put.many", NOW, *many_args(jobs)) == ["b", "x"]
    assert (r.hget("ql:j:b", "state"), r.hget("ql:j:x", "state")) == ("waiting", "depends")
    assert r.smembers("ql:j:x-dependencies") == {"b"}
    assert r.exists("ql:j:b-dependencies") == 0


# -- Queue.put_many ----------------------------------------------------------------------------


def engine_calls(r: redis.Redis) -> int:
    """Engine calls so far (FCALL or EVALSHA)."""
    stats = r.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0))
               for name in ("fcall", "evalsha", "eval"))


def test_queue_put_many_sends_chunks_in_fifo_order(
    client: Client, q: Queue, r: redis.Redis, clock: FakeClock
) -> None:
    q.put("K", {}, jid="first")
    calls = engine_calls(r)
    jids = q.put_many([{"klass": "K", "data": {"i": i}} for i in range(1201)])
    assert engine_calls(r) - calls == 3  # 500 + 500 + 201, on a clock that stands still
    assert r.zrevrange("ql:q:q-work", 0, -1) == ["first", *jids]
    assert len(set(jids)) == 1201
    assert json.loads(r.hget(f"ql:j:{jids[700]}", "data")) == {"i": 700}


def test_queue_put_many_refused_chunk_writes_nothing(client: Client, q: Queue,
                                                     r: redis.Redis) -> None:
    """A job only the engine can refuse (recurring collision) stops its chunk, not earlier."""
    q.recur("K", {}, 60, jid="rec")
    jobs: list[dict[str, Any]] = [{"klass": "K", "data": {}, "jid": f"j{i}"} for i in range(1000)]
    jobs[700]["jid"] = "rec-1"
    with pytest.raises(InvalidArgument, match="job 201: Job rec-1 collides with recurring job"):
        q.put_many(jobs)
    assert r.zcard("ql:q:q-work") == 500
    assert r.exists("ql:j:j499") == 1 and r.exists("ql:j:j500") == 0


def test_queue_put_many_validates_everything_before_sending(client: Client, q: Queue,
                                                            r: redis.Redis) -> None:
    jobs: list[dict[str, Any]] = [{"klass": "K", "data": {}} for _ in range(900)]
    jobs[800] = {"klass": "K", "data": {}, "priority": "x"}
    calls = engine_calls(r)
    with pytest.raises(InvalidArgument):
        q.put_many(jobs)
    jobs[800] = {"klass": "K", "data": {"s": "\ud800"}}
    with pytest.raises(InvalidArgument):
        q.put_many(jobs)
    # the class is checked whenever it changes, whatever the jobs before it had
    for klass in (None, "", "K\ud800", "a\nb", 7):
        jobs[800] = {"klass": klass, "data": {}}
        with pytest.raises(InvalidArgument, match="klass"):
            q.put_many(jobs)
        with pytest.raises(InvalidArgument, match="klass"):
            q.put_many([{"klass": klass, "data": {}}])
    assert engine_calls(r) == calls
    assert r.keys("ql:j:*") == []


def test_queue_put_many_options(client: Client, q: Queue, r: redis.Redis) -> None:
    jids = q.put_many([
        {"klass": "K", "data": {}, "jid": "a", "tags": ["x"], "priority": 5},
        {"klass": "K", "data": {}, "jid": "b", "depends": ["a"], "throttles": ["t"]},
        {"klass": "K", "data": {}, "jid": "c", "delay": 30, "retries": 1},
    ])
    assert jids == ["a", "b", "c"]
    assert [client.jobs[j].state for j in jids] == ["waiting", "depends", "scheduled"]
    assert list(client.jobs["b"].throttles) == ["t"]
    assert list(client.jobs["a"].tags) == ["x"] and client.jobs["a"].priority == 5
    assert q.put_many([]) == []


# -- the chunk calls overlap, and still stop at the first refused chunk ------------------------


def test_queue_put_many_refused_middle_chunk_puts_only_the_chunks_before(
    client: Client, q: Queue, r: redis.Redis
) -> None:
    """Chunk 2 of 3 is refused by the engine: chunk 1 is put, chunks 2 and 3 are not (chunk 3
    was already sent, queued behind chunk 2, and is discarded)."""
    q.recur("K", {}, 60, jid="rec")
    jobs: list[dict[str, Any]] = [{"klass": "K", "data": {}, "jid": f"j{i}"} for i in range(1500)]
    jobs[700]["jid"] = "rec-1"
    with pytest.raises(InvalidArgument, match="job 201: Job rec-1 collides with recurring job"):
        q.put_many(jobs)
    assert r.zrevrange("ql:q:q-work", 0, -1) == [f"j{i}" for i in range(500)]
    assert sorted(r.keys("ql:j:*")) == sorted(f"ql:j:j{i}" for i in range(500))
    # the next batch runs whole (the connection was left clean, or dropped)
    jobs[700]["jid"] = "j700"
    assert q.put_many(jobs) == [f"j{i}" for i in range(1500)]
    assert r.zrevrange("ql:q:q-work", 0, -1) == [f"j{i}" for i in range(1500)]


def test_queue_put_many_chunk_refused_before_it_runs(client: Client, q: Queue,
                                                    r: redis.Redis) -> None:
    """Out of memory after a chunk or two: the next chunk is refused (OOM) as it is queued,
    without running, and the error is the one a single call gets; the chunks before it
    are put whole, in order."""
    if keyspace_mode.CLUSTER:
        pytest.skip("sets maxmemory on the test server")
    q.put_many([{"klass": "K", "data": {}} for _ in range(1200)])  # connections as below
    r.flushall(asynchronous=False)
    q.put("K", {}, jid="first")
    used = int(r.info("memory")["used_memory"])
    # A chunk of 500 waiting jobs takes ~190 KB (lean records) to ~270 KB: chunk 1 fits and
    # 4,000 jobs do not, even when `used` was read while the server still held a few hundred
    # KB of client buffers from the warm-up that it frees later.
    r.config_set("maxmemory", used + 300_000)
    try:
        with pytest.raises(QlessError, match="OOM command not allowed"):
            q.put_many([{"klass": "K", "data": {"i": i}} for i in range(4000)])
        put = r.zrevrange("ql:q:q-work", 0, -1)
        assert put[0] == "first" and (len(put) - 1) % 500 == 0 and 0 < len(put) - 1 < 4000
        assert [json.loads(r.hget(f"ql:j:{jid}", "data"))["i"] for jid in put[1:]] == list(
            range(len(put) - 1))
    finally:
        r.config_set("maxmemory", 0)
    assert len(q.put_many([{"klass": "K", "data": {}} for _ in range(1200)])) == 1200


@pytest.mark.parametrize("engine", ["function", "script"])
def test_queue_put_many_reloads_a_flushed_engine_midway(
    engine: str, redis_url: str, r: redis.Redis, redis_version_info: tuple[int, ...]
) -> None:
    """The engine is flushed after a client loaded it: the first chunk finds it missing,
    the client loads it again and every chunk runs once, in order."""
    if keyspace_mode.CLUSTER:
        pytest.skip("flushes the engine of the test server")
    if engine == "function" and redis_version_info < (7,):
        pytest.skip("functions need Redis 7")
    client = Client(redis_url, worker_name="w1", engine=engine)
    try:
        q = client.queues["q"]
        q.put("K", {}, jid="first")
        if engine == "function":
            r.function_flush()
        else:
            r.script_flush()
        jids = q.put_many([{"klass": "K", "data": {"i": i}} for i in range(1200)])
        assert r.zrevrange("ql:q:q-work", 0, -1) == ["first", *jids]
        assert len(set(jids)) == 1200
    finally:
        client.close()


def test_queue_put_many_new_job_matches_put(client: Client, q: Queue, r: redis.Redis) -> None:
    """A job given only klass and data is sent without put's default options: the same job."""
    single = q.put("K", {"i": 1})
    [many] = q.put_many([{"klass": "K", "data": {"i": 1}}])
    one, other = r.hgetall(f"ql:j:{single}"), r.hgetall(f"ql:j:{many}")
    assert other.get("jid", many) == many and other["state"] == "waiting"  # (lean: no jid)
    skip = {"jid", "time", "history"}
    assert {k: v for k, v in one.items() if k not in skip} == {
        k: v for k, v in other.items() if k not in skip}
    assert client.jobs[many].data == {"i": 1} and client.jobs[many].retries == 5


def test_queue_put_many_without_multi_runs_the_chunks_one_by_one(
    redis_url: str, r: redis.Redis, redis_server: Any
) -> None:
    """The dedicated ACL user of docs/guarantees.md has no MULTI: put_many still puts every
    chunk in order, and still stops at a refused one."""
    if keyspace_mode.CLUSTER:
        pytest.skip("creates a user on the test server")
    r.execute_command(
        "ACL", "SETUSER", "qlessputs", "on", ">pw", "resetkeys", "~ql:*", "resetchannels",
        "&ql:*", "-@all", "+@read", "+@write", "+@scripting", "+@pubsub", "-@dangerous",
        "+ping", "+time", "+info", "+select", "+hello")
    limited = redis.Redis(unix_socket_path=redis_server.socket_path, username="qlessputs",
                          password="pw", decode_responses=True)
    client = Client(limited, worker_name="w1")
    try:
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.execute_command("MULTI")
        q = client.queues["q"]
        jids = q.put_many([{"klass": "K", "data": {"i": i}} for i in range(1200)])
        assert r.zrevrange("ql:q:q-work", 0, -1) == jids and len(set(jids)) == 1200
        q.recur("K", {}, 60, jid="rec")
        jobs: list[dict[str, Any]] = [{"klass": "K", "data": {}, "jid": f"j{i}"}
                                      for i in range(1500)]
        jobs[700]["jid"] = "rec-1"
        with pytest.raises(InvalidArgument, match="job 201: Job rec-1 collides"):
            q.put_many(jobs)
        assert r.zrevrange("ql:q:q-work", 0, -1) == [*jids, *(f"j{i}" for i in range(500))]
    finally:
        client.close()
        limited.close()
        r.acl_deluser("qlessputs")
