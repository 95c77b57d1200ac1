"""A reserve over many queues: queues known to be empty cost no Redis command.

The engine remembers (in memory, docs/engine.md "Known-empty queues") which queues a pop
drained; a later reserve skips them until their `#due` bound, and every engine write that
makes a job ready or adds a timer ends the mark at once.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from django_qless.core.hotpath import list_id

__all__: list[str] = []

EMPTY = [f"e{i:02d}" for i in range(20)]
SCRIPT_CALLS = {"fcall", "fcall_ro", "evalsha", "eval", "info", "config|resetstat", "flushall"}


def inner_commands(r: redis.Redis) -> dict[str, int]:
    """Commands run since the last reset, by name, without the engine calls themselves."""
    stats = r.info("commandstats")
    return {k[len("cmdstat_"):]: int(v["calls"]) for k, v in stats.items()
            if k[len("cmdstat_"):] not in SCRIPT_CALLS}


def put(lua: Any, queue: str, jid: str, now: float, delay: float = 0, **opts: Any) -> Any:
    pairs = [x for k, v in opts.items() for x in (k, json.dumps(v) if isinstance(v, list) else v)]
    return lua("put", now, "w", queue, jid, "klass", "{}", delay, *pairs)


def reserve(lua: Any, now: float, *queues: str, worker: str = "w", count: int = 1) -> Any:
    return lua.json("reserve", now, worker, count, *queues)


def needs_memory(lua: Any) -> None:
    """Skip unless the engine is a Redis 7 function: under EVALSHA a mark lasts one call."""
    if lua.function is None:
        pytest.skip("under EVALSHA the engine keeps no marks across calls")


def approx(value: float) -> Any:
    return pytest.approx(value, abs=1e-6)


def jids(reply: Any) -> list[str]:
    return [job["jid"] for job in reply["jobs"]]


def test_an_empty_reserve_over_20_known_empty_queues_runs_one_command(
        lua: Any, r: redis.Redis) -> None:
    """After the first, an empty reserve over 20 queues reads one config field, nothing else."""
    needs_memory(lua)
    first = reserve(lua, 100, *EMPTY)
    assert first["jobs"] == [] and first["wake"] == -1
    r.config_resetstat()
    again = reserve(lua, 100.5, *EMPTY)
    assert again["jobs"] == [] and again["wake"] == -1
    assert inner_commands(r) == {"hmget": 1}


def test_a_reserve_over_20_empty_queues_and_a_full_one_costs_a_one_queue_reserve(
        lua: Any, r: redis.Redis) -> None:
    """The job in the 21st queue is popped with the commands a reserve of that queue alone runs."""
    needs_memory(lua)
    for i in range(3):
        put(lua, "full", f"j{i}", 99 + i / 10)
    reserve(lua, 100, *EMPTY)
    reserve(lua, 100, "full")
    r.config_resetstat()
    assert jids(reserve(lua, 100.1, "full")) == ["j1"]
    alone = inner_commands(r)
    r.config_resetstat()
    assert jids(reserve(lua, 100.2, *EMPTY[:19], "full")) == ["j2"]
    assert inner_commands(r) == alone


def drain(lua: Any, now: float, *queues: str) -> None:
    """Pop the queues empty with room to spare: the pop knows it emptied them (a mark)."""
    reserve(lua, now, *queues, worker="w", count=2)


# Each case: what exists before queue a is drained, then the write that readies a job in a.
READY_WRITES: dict[str, tuple[Any, Any]] = {
    "put": (lambda lua: None, lambda lua: put(lua, "a", "j", 100.1)),
    "put.many": (lambda lua: None,
                 lambda lua: lua("put.many", 100.1, "w", "a", 1, "j", "klass", "{}", 0, 0)),
    "move": (lambda lua: put(lua, "b", "j", 99), lambda lua: put(lua, "a", "j", 100.1)),
    "retry": (lambda lua: put(lua, "a", "j", 99),  # (the drain pops it)
              lambda lua: lua("retry", 100.1, "j", "a", "w", 0, "group", "msg")),
    "unfail": (lambda lua: put(lua, "a", "j", 99),
               lambda lua: (lua("fail", 100.05, "j", "w", "group", "msg", "{}"),
                            lua("unfail", 100.1, "a", "group", 10))),
    "timeout": (lambda lua: put(lua, "a", "j", 99), lambda lua: lua("timeout", 100.1, "j")),
    "complete to a next queue": (
        lambda lua: (put(lua, "b", "j", 99), reserve(lua, 99.5, "b")),
        lambda lua: lua("complete", 100.1, "j", "w", "b", "{}", "next", "a")),
    "finished dependency": (
        lambda lua: (put(lua, "b", "dep", 99), put(lua, "a", "j", 99, depends=["dep"]),
                     reserve(lua, 99.5, "b")),
        lambda lua: lua("complete", 100.1, "dep", "w", "b", "{}")),
}


@pytest.mark.parametrize("write", list(READY_WRITES))
def test_a_write_that_makes_a_job_ready_ends_the_mark(lua: Any, write: str) -> None:
    """put, put.many, a move, a retry, an unfail, a timeout, a complete to a next queue and a
    finished dependency each make the job reservable at once in a known-empty queue."""
    before, ready = READY_WRITES[write]
    before(lua)
    drain(lua, 100, "a", "x")
    assert reserve(lua, 100.05, "a", "x", worker="w2")["jobs"] == []
    ready(lua)
    assert jids(reserve(lua, 100.2, "x", "a", worker="w2")) == ["j"]


def test_a_released_throttle_slot_ends_the_mark(lua: Any, r: redis.Redis) -> None:
    """A job held back by a throttle becomes reservable when the slot is freed."""
    lua("throttle.set", 100, "t", 1)
    put(lua, "a", "one", 99, throttles=["t"])
    put(lua, "a", "two", 99.5, throttles=["t"])
    assert jids(reserve(lua, 100, "a", count=2)) == ["one"]  # two waits for the slot
    assert reserve(lua, 100.1, "a")["jobs"] == []  # a is known empty
    lua("complete", 100.2, "one", "w", "a", "{}")
    assert jids(reserve(lua, 100.3, "a")) == ["two"]


def test_a_job_written_by_another_writer_is_reserved_within_the_horizon(
        lua: Any, r: redis.Redis) -> None:
    """Direct writes of the work set (a stock writer's put) are seen once the bound passes."""
    put(lua, "other", "x", 99)
    reserve(lua, 100, "a")  # a is known empty until 101
    # a stock writer moves the job: its hash and the work set, no call of this engine
    r.zrem("ql:q:other-work", "x")
    r.zadd("ql:q:a-work", {"x": 0})
    r.hset("ql:j:x", "queue", "a")
    if lua.function is not None:
        assert reserve(lua, 100.5, "a")["jobs"] == []  # still skipped: the mark holds
    assert jids(reserve(lua, 101, "a")) == ["x"]


def test_a_worker_about_to_sleep_looks_past_the_marks(lua: Any, r: redis.Redis) -> None:
    """reserve.wait (after it a worker sleeps until a hand-off or a wake-up) takes a job
    another writer put into a known-empty queue (another engine version during a rolling
    upgrade, a stock client): that writer could not end this engine's mark, and its wake-up
    came before the call."""
    needs_memory(lua)
    put(lua, "other", "x", 99)
    reserve(lua, 100, "a", "b")  # a and b known empty until 101
    r.zrem("ql:q:other-work", "x")
    r.zadd("ql:q:a-work", {"x": 0})
    r.hset("ql:j:x", "queue", "a")
    assert reserve(lua, 100.2, "a", "b")["jobs"] == []  # a plain reserve still skips a
    assert jids(lua.json("reserve.wait", 100.5, "w", 10, 1, "b", "a")) == ["x"]
    assert r.hgetall("ql:idle") == {}  # it took the job: not registered


def test_a_worker_about_to_sleep_checks_its_marks_with_one_command(
        lua: Any, r: redis.Redis) -> None:
    """With nothing there, reserve.wait over known-empty queues adds one EXISTS of their work
    sets to what the reserve runs, and registers."""
    needs_memory(lua)
    reserve(lua, 100, *EMPTY)
    r.config_resetstat()
    reply = lua.json("reserve.wait", 100.5, "w", 10, 1, *EMPTY)
    assert reply["jobs"] == []
    assert inner_commands(r).get("exists") == 1
    assert r.hget("ql:idle", "w") == " ".join(EMPTY)


def test_a_flush_ends_every_mark(lua: Any, r: redis.Redis) -> None:
    """After FLUSHALL a job written directly is reserved at once."""
    put(lua, "other", "x", 99)
    reserve(lua, 100, "a")
    saved = r.hgetall("ql:j:x")
    r.flushall()
    r.hset("ql:j:x", mapping={**saved, "queue": "a"})
    r.zadd("ql:q:a-work", {"x": 0})
    assert jids(reserve(lua, 100.1, "a")) == ["x"]


def test_pause_and_unpause_take_effect_at_once(lua: Any, r: redis.Redis) -> None:
    """A queue known empty, paused, given a job: nothing until unpaused, then at once."""
    reserve(lua, 100, "a", "b")
    lua("pause", 100.1, "a")
    put(lua, "a", "j", 100.2)
    assert reserve(lua, 100.3, "a", "b")["jobs"] == []
    lua("unpause", 100.4, "a")
    assert jids(reserve(lua, 100.5, "a", "b")) == ["j"]
    put(lua, "a", "k", 100.6)
    lua("pause", 100.7, "a")
    assert reserve(lua, 100.8, "b", "a")["jobs"] == []


def test_a_scheduled_job_in_a_known_empty_queue_is_reserved_at_its_time(
        lua: Any, r: redis.Redis) -> None:
    """A delayed put into a known-empty queue: the wake hint says when, the reserve then has it."""
    assert reserve(lua, 100, *EMPTY)["wake"] == -1
    put(lua, "e05", "s", 100.1, delay=0.3)
    assert reserve(lua, 100.2, *EMPTY)["wake"] == approx(0.2)
    assert reserve(lua, 100.3, *EMPTY)["wake"] == approx(0.1)  # (remembered)
    assert jids(reserve(lua, 100.4, *EMPTY)) == ["s"]


def test_a_recurring_job_in_a_known_empty_queue_spawns_at_its_time(
        lua: Any, r: redis.Redis) -> None:
    """A recurring job made in a known-empty queue spawns at its first due time."""
    reserve(lua, 100, "a")
    lua("recur", 100.1, "a", "rec", "klass", "{}", "interval", 60, 0.4)
    assert reserve(lua, 100.2, "a")["jobs"] == []
    assert jids(reserve(lua, 100.5, "a")) == ["rec-1"]


def test_an_expired_lock_in_a_known_empty_queue_is_handled_at_its_time(
        lua: Any, r: redis.Redis) -> None:
    """The pop that drained a queue also took a lock: its expiry is not skipped."""
    lua("config.set", 0, "a-heartbeat", 2)
    lua("config.set", 0, "grace-period", 0)
    put(lua, "a", "j", 99)
    assert jids(reserve(lua, 100, "a")) == ["j"]  # drained: a is known empty
    assert reserve(lua, 101.5, "a", worker="w2")["wake"] == approx(0.5)
    assert reserve(lua, 101.9, "a", worker="w2")["jobs"] == []
    assert jids(reserve(lua, 102, "a", worker="w2")) == ["j"]



def test_a_lease_renewed_shorter_ends_the_mark(lua: Any, r: redis.Redis) -> None:
    """A heartbeat that moves the lock before the mark's bound is not skipped past."""
    lua("config.set", 0, "a-heartbeat", 2)
    lua("config.set", 0, "grace-period", 0)
    put(lua, "a", "j", 99)
    assert jids(reserve(lua, 100, "a", count=2)) == ["j"]  # drained: known empty until 101
    lua("config.set", 0, "a-heartbeat", 1)
    # (a caller whose clock runs 0.5 s behind): the lock now expires at 100.5
    lua("heartbeat", 99.5, "j", "w", "{}")
    assert jids(reserve(lua, 100.5, "a", worker="w2")) == ["j"]


# -- queue lists held by id (pop.lua, Q.queue_list; the client's side: core/hotpath.py) ----

LISTED = [f"m{i:03d}" for i in range(100)]
ENGINE_CALLS = ("fcall", "evalsha")


def engine_calls(r: redis.Redis) -> int:
    """Engine calls (FCALL / EVALSHA) since the last reset."""
    stats = r.info("commandstats")
    return sum(int(v["calls"]) for k, v in stats.items() if k[len("cmdstat_"):] in ENGINE_CALLS)


def engine_argvs(r: redis.Redis) -> list[list[str]]:
    """The engine calls logged since `slowlog_reset` (every command is logged: threshold 0)."""
    out = []
    for entry in reversed(r.slowlog_get(10000)):
        argv = str(entry["command"], "utf-8") if isinstance(entry["command"], bytes) \
            else str(entry["command"])
        words = argv.split(" ")
        if words[0].lower() in ENGINE_CALLS:
            out.append(words)
    return out


@pytest.fixture
def slowlog(r: redis.Redis) -> Any:
    """Log every command's arguments (SLOWLOG with a threshold of 0) for this test."""
    old = r.config_get("slowlog-*")
    r.config_set("slowlog-log-slower-than", 0)
    r.config_set("slowlog-max-len", 10000)
    r.slowlog_reset()
    yield r
    for name in ("slowlog-log-slower-than", "slowlog-max-len"):
        r.config_set(name, old[name])


def test_a_list_held_by_id_reserves_its_queues_in_order(lua: Any) -> None:
    """`@id names` reserves those queues and holds the list; `@id` alone then names it."""
    needs_memory(lua)
    put(lua, "m050", "late", 99)
    put(lua, "m007", "early", 99.5)
    put(lua, "m099", "last", 98)
    assert jids(reserve(lua, 100, "@l1", *LISTED)) == ["early"]
    assert jids(reserve(lua, 100.1, "@l1")) == ["late"]
    assert jids(reserve(lua, 100.2, "@l1", count=5)) == ["last"]
    assert reserve(lua, 100.3, "@l1")["jobs"] == []


def test_an_unknown_list_id_is_refused_before_any_write(lua: Any, r: redis.Redis) -> None:
    """`@id` alone with no list held: an error, and complete.reserve completed nothing."""
    put(lua, "a", "j", 99)
    assert jids(reserve(lua, 100, "a")) == ["j"]
    with pytest.raises(redis.ResponseError, match="queue list @nope is not held"):
        reserve(lua, 100.1, "@nope")
    with pytest.raises(redis.ResponseError, match="is not held"):
        lua("complete.reserve", 100.2, "j", "w", "a", "{}", "", 1, "@nope")
    assert r.hget("ql:j:j", "state") == "running"
    with pytest.raises(redis.ResponseError, match="invalid list id"):
        reserve(lua, 100.3, "@no pe", "a")


def client_jobs(client: Any, queues: list[str], n: int = 1) -> list[str]:
    return [job.jid for job in client.reserve(queues, n)[0]]


def engine_mode(client: Any) -> str:
    """How the client calls the engine: function or script (decided by a first call)."""
    client.call("config.get", "heartbeat")
    return str(client.channel.mode)


def test_the_client_names_its_queues_once(client: Any, slowlog: redis.Redis) -> None:
    """A list is sent as names the first time, with its id the second, and as the id alone
    from then on (under EVALSHA, where the engine holds nothing across calls, always as
    names); a list the client names once (a shuffled order) is never held."""
    script = engine_mode(client) == "script"
    q = client.queues["m099"]
    jid1, jid2, jid3 = (q.put("k", {}, priority=p) for p in (3, 2, 1))
    assert client_jobs(client, list(reversed(LISTED))) == [jid1]
    assert client_jobs(client, LISTED) == [jid2]
    job3 = client.reserve(LISTED)[0][0]
    assert job3.jid == jid3
    assert client.complete_and_reserve(job3, LISTED)[1] == []
    calls = [a for a in engine_argvs(slowlog) if "reserve" in a or "complete.reserve" in a]
    assert len(calls) == 4
    held = [any(w.startswith("@") for w in a) for a in calls]
    if script:
        assert not any(held) and all(any(w.startswith("m0") for w in a) for a in calls)
        return
    ident = list_id(LISTED)
    assert held == [False, False, True, True]
    assert "m000" in calls[1] and ident in calls[2] and "m000" in calls[2]
    assert calls[3][-1] == ident and len(calls[3]) <= 13


@pytest.mark.parametrize("reset", ["flushall", "function flush", "script flush"])
def test_the_client_reserves_right_after_the_engine_forgets(
        client: Any, r: redis.Redis, reset: str) -> None:
    """FLUSHALL keeps the held list (names only); a reloaded engine has none: the client is
    told, resends the names, and names the list by id again after that."""
    assert client_jobs(client, LISTED) == []
    assert client_jobs(client, LISTED) == []  # (the second time: the engine holds the list)
    script = client.channel.mode == "script"
    if reset == "flushall":
        r.flushall()
    elif reset == "function flush":
        if script:
            pytest.skip("no functions under EVALSHA")
        r.function_flush()
    else:
        r.script_flush()
    jid = client.queues["m060"].put("k", {})  # (loads the engine again if it is gone)
    r.config_resetstat()
    assert client_jobs(client, LISTED) == [jid]
    if not script:  # (under EVALSHA a NOSCRIPT may cost a call: nothing of this change)
        # one list miss after a reloaded function, then the names
        assert engine_calls(r) == 1 + (reset == "function flush")
    jid2 = client.queues["m000"].put("k", {})
    r.config_resetstat()
    assert client_jobs(client, LISTED) == [jid2]
    assert engine_calls(r) == 1


def test_a_second_client_and_a_raw_caller_share_the_held_list(
        client: Any, lua: Any, redis_url: str, clock: Any) -> None:
    """Another client naming the same queues, and a raw `@id` call, reserve from that list."""
    from django_qless.core.client import Client

    needs_memory(lua)
    q = client.queues["m042"]
    jids_ = [q.put("k", {}, priority=3 - i) for i in range(3)]
    assert client_jobs(client, LISTED) == jids_[:1]
    other = Client(redis_url, worker_name="w2", _clock=clock)
    try:
        assert client_jobs(other, LISTED) == jids_[1:2]
        assert client_jobs(other, LISTED) == jids_[2:]
    finally:
        other.close()
    q.put("k", {}, jid="raw")
    reply = lua.json("reserve", clock.now() if hasattr(clock, "now") else 0, "w3", 1,
                     list_id(LISTED))
    assert jids(reply) == ["raw"]


def test_a_complete_and_reserve_over_100_held_queues_costs_one_over_its_queue(
        client: Any, r: redis.Redis, slowlog: redis.Redis) -> None:
    """With 60 queues drained (known empty) ahead of the one with jobs, a complete_and_reserve
    over the held list runs the commands of one over that queue alone, in one engine call."""
    if engine_mode(client) == "script":
        pytest.skip("under EVALSHA the engine keeps no marks or lists across calls")

    def one_call(queues: list[str], queue: str) -> dict[str, int]:
        warm = client.queues["warm"]  # (the first complete trims the completed jobs)
        warm.put("k", {})
        warm_job = warm.pop()
        assert warm_job is not None
        warm_job.complete()
        for name in queues[:60]:
            client.queues[name].put("k", {})
        q = client.queues[queue]
        q.put("k", {}, priority=2)
        q.put("k", {}, priority=1)
        job = None
        for _ in range(61 if len(queues) > 1 else 1):
            job = client.reserve(queues)[0][0]
            if job.queue_name != queue:
                job.complete()
        # (each earlier queue is known empty: the reserve after the one taking its job
        # found it drained)
        assert job is not None and job.queue_name == queue
        r.config_resetstat()
        slowlog.slowlog_reset()
        _, more, _ = client.complete_and_reserve(job, queues)
        assert [j.queue_name for j in more] == [queue]
        assert engine_calls(r) == 1
        calls = engine_argvs(slowlog)
        assert len(calls) == 1 and len(calls[0]) <= 15
        return inner_commands(r)

    alone = one_call(["solo"], "solo")
    r.flushall()
    assert one_call(LISTED, "m080") == alone


def test_a_deferred_complete_and_reserve_resends_its_queues_after_a_reload(
        client: Any, r: redis.Redis) -> None:
    """The worker's overlapped complete_and_reserve: a list miss is resent with the names."""
    if engine_mode(client) == "script":
        pytest.skip("no functions under EVALSHA")
    assert client_jobs(client, LISTED) == []  # (the second reserve holds the list)
    q = client.queues["m010"]
    first, second = q.put("k", {}, priority=1), q.put("k", {})
    job = client.reserve(LISTED)[0][0]
    assert job.jid == first
    r.function_flush()
    client.call("config.get", "heartbeat")  # (loads the engine again, without any list)
    state, more, _ = client.send_complete_and_reserve(job, LISTED).result()
    assert state == "complete" and [j.jid for j in more] == [second]


def test_a_held_list_resumes_after_its_known_empty_queues_and_keeps_the_order(
        lua: Any, r: redis.Redis) -> None:
    """The scan of a held list starts after the queues the last call saw known empty; a job
    made ready in one of them (put, a due scheduled job, a direct write once its bound
    passes) is still reserved before the later queues' jobs."""
    needs_memory(lua)
    names = ["a", "b", "c", "d"]
    for i in range(7):
        put(lua, "d", f"d{i}", 99 + i / 100)
    reserve(lua, 100, "@l", *names)  # a, b, c drained (known empty), d0 taken
    assert jids(reserve(lua, 100.01, "@l")) == ["d1"]
    put(lua, "b", "b-put", 100.02)
    assert jids(reserve(lua, 100.03, "@l")) == ["b-put"]
    assert jids(reserve(lua, 100.04, "@l")) == ["d2"]  # (b drained again)
    assert jids(reserve(lua, 100.05, "@l")) == ["d3"]  # (resumes at d)
    put(lua, "c", "c-later", 100.06, delay=0.1)
    assert jids(reserve(lua, 100.07, "@l")) == ["d4"]
    assert jids(reserve(lua, 100.16, "@l")) == ["c-later"]
    assert jids(reserve(lua, 100.17, "@l")) == ["d5"]
    # a stock writer's job in a: seen once a's bound (at most 1 s) passes
    r.zadd("ql:q:a-work", {"d6": 0})
    r.zrem("ql:q:d-work", "d6")
    r.hset("ql:j:d6", "queue", "a")
    put(lua, "d", "d7", 100.2)
    assert jids(reserve(lua, 100.3, "@l")) == ["d7"]
    assert jids(reserve(lua, 101.5, "@l")) == ["d6"]


def test_a_held_list_rescans_when_the_clock_goes_back(lua: Any, r: redis.Redis) -> None:
    """A caller whose clock is behind the last call's does not resume past a mark it would
    not trust (one more than the horizon ahead of its `now`)."""
    needs_memory(lua)
    for i in range(3):
        put(lua, "b", f"j{i}", 99 + i / 10)
    put(lua, "other", "x", 99)
    assert jids(reserve(lua, 100, "@l2", "a", "b")) == ["j0"]  # a known empty until 101
    assert jids(reserve(lua, 100.9, "@l2")) == ["j1"]  # (resumes at b)
    # a stock writer's job in a, then a caller 1 s behind: a's mark (101) is beyond 99.9 + 1
    r.zrem("ql:q:other-work", "x")
    r.zadd("ql:q:a-work", {"x": 0})
    r.hset("ql:j:x", "queue", "a")
    assert jids(reserve(lua, 99.9, "@l2")) == ["x"]
