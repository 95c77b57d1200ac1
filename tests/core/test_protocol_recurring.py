"""Conformance of recurring jobs."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.core.keyspace_mode import KEYSPACE

__all__: list[str] = []

RECUR = "ql:q:queue-recur"
WORK = "ql:q:queue-work"


def recur(lua: Any, jid: str = "rec", *, now: float = 0, interval: float = 60, offset: float = 0,
          queue: str = "queue", data: Any = None, **opts: Any) -> Any:
    """Create or update a recurring job; keyword options become trailing pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("recur", now, queue, jid, "klass", {} if data is None else data, "interval",
               interval, offset, *pairs)


def pop(lua: Any, now: float, count: int = 1, queue: str = "queue") -> Any:
    """Pop and decode (always a list; `{}` becomes [])."""
    jobs = lua.json("pop", now, queue, "worker", count)
    return [] if jobs == {} else jobs


def puts(jobs: list[Any]) -> list[int]:
    """Return the put time of each job object."""
    return [job["history"][0]["when"] for job in jobs]


# -- recur --------------------------------------------------------------------------------------


def test_recur_returns_jid(lua: Any) -> None:
    """Reply with the jid."""
    assert recur(lua) == "rec"


def test_recur_writes_template(lua: Any, r: redis.Redis) -> None:
    """Store the template hash with every documented field."""
    recur(lua, data='{"x": []}', interval=60, priority=2, retries=3, backlog=4, tags=["t"])
    rec = r.hgetall("ql:r:rec")
    assert r.type("ql:r:rec") == "hash"
    assert rec["jid"] == "rec"
    assert rec["klass"] == "klass"
    assert rec["data"] == '{"x": []}'
    assert rec["state"] == "recur"
    assert rec["queue"] == "queue"
    assert rec["type"] == "interval"
    assert float(rec["count"]) == 0
    assert float(rec["interval"]) == 60
    assert float(rec["priority"]) == 2
    assert float(rec["retries"]) == 3
    assert float(rec["backlog"]) == 4


def test_recur_schedules_at_now_plus_offset(lua: Any, r: redis.Redis) -> None:
    """Score the jid in `-recur` with now + offset and register the queue."""
    recur(lua, now=1700000000.5, offset=30)
    assert r.zscore(RECUR, "rec") == 1700000030.5
    assert r.zscore("ql:queues", "queue") == 1700000000.5


def test_recur_get(lua: Any) -> None:
    """Return the template as JSON with numbers and decoded tags."""
    recur(lua, interval=60, priority=2, retries=3, tags=["a", "b"])
    rec = lua.json("recur.get", 0, "rec")
    expected = {"jid": "rec", "klass": "klass", "state": "recur", "queue": "queue",
                "priority": 2, "interval": 60, "retries": 3, "count": 0, "data": "{}",
                "tags": ["a", "b"], "backlog": 0}
    assert {k: rec[k] for k in expected} == expected


def test_recur_get_defaults(lua: Any) -> None:
    """Default retries 0, priority 0, backlog 0, tags `{}` at the protocol level."""
    recur(lua)
    rec = lua.json("recur.get", 0, "rec")
    assert (rec["retries"], rec["priority"], rec["backlog"], rec["tags"]) == (0, 0, 0, {})


def test_recur_get_missing(lua: Any) -> None:
    """Reply nil for an unknown recurring job."""
    assert lua("recur.get", 0, "nope") is None


def test_recur_unknown_schedule_type(lua: Any) -> None:
    """Only `interval` is a schedule type."""
    with pytest.raises(redis.ResponseError, match='Recur\\(\\): schedule type "cron" unknown'):
        lua("recur", 0, "queue", "rec", "klass", {}, "cron", 60, 0)


def test_rerecur_keeps_count_and_moves(lua: Any, r: redis.Redis) -> None:
    """Re-issuing recur updates, moves, keeps the next run and keeps the counter."""
    recur(lua)
    pop(lua, 0)
    recur(lua, now=100, queue="other", offset=5)
    assert r.zscore(RECUR, "rec") is None
    assert r.zscore("ql:q:other-recur", "rec") == 60
    assert lua.json("recur.get", 0, "rec")["count"] == 1
    assert [j["jid"] for j in pop(lua, 105, queue="other")] == ["rec-2"]


# -- spawning -----------------------------------------------------------------------------------


def test_pop_spawns_child(lua: Any, r: redis.Redis) -> None:
    """Spawn `<jid>-1` with the template's attributes."""
    recur(lua, priority=1, retries=2, tags=["t"], data='{"a": []}')
    jobs = pop(lua, 0)
    assert [j["jid"] for j in jobs] == ["rec-1"]
    child = jobs[0]
    assert child["spawned_from_jid"] == "rec"
    assert (child["klass"], child["priority"], child["retries"]) == ("klass", 1, 2)
    assert child["tags"] == ["t"]
    assert child["data"] == '{"a": []}'
    assert child["history"][0] == {"when": 0, "what": "put", "q": "queue"}
    assert r.zscore(RECUR, "rec") == 60
    assert lua.json("recur.get", 0, "rec")["count"] == 1


def test_child_hash_fields(lua: Any, r: redis.Redis) -> None:
    """Write the child hash like a put at the nominal time."""
    recur(lua, retries=2)
    lua("peek", 30, "queue", 1)
    child = r.hgetall("ql:j:rec-1")
    if KEYSPACE is not None:  # a lean record (docs/engine.md, "Lean job records")
        assert not {"jid", "worker", "expires", "priority", "tags", "remaining"} & set(child)
        child.update(worker="", remaining=child["retries"])
    assert (child["state"], child["queue"], child["worker"]) == ("waiting", "queue", "")
    assert float(child["remaining"]) == 2
    assert float(child["time"]) == 0
    assert child["spawned_from_jid"] == "rec"


def test_not_due_yet(lua: Any) -> None:
    """Nothing spawns before the next run time."""
    recur(lua, offset=10)
    assert pop(lua, 9) == []
    assert [j["jid"] for j in pop(lua, 10)] == ["rec-1"]


def test_catch_up_spawns_missed_runs(lua: Any, r: redis.Redis) -> None:
    """pop(count 10) at 599 spawns the 10 runs at 0, 60, ..., 540."""
    recur(lua)
    jobs = pop(lua, 599, count=10)
    assert [j["jid"] for j in jobs] == [f"rec-{n}" for n in range(1, 11)]
    assert puts(jobs) == list(range(0, 600, 60))
    assert r.zscore(RECUR, "rec") == 600


def test_spawn_limited_by_count(lua: Any, r: redis.Redis) -> None:
    """Spawn only as many children as the popper wants."""
    recur(lua)
    assert [j["jid"] for j in pop(lua, 599, count=2)] == ["rec-1", "rec-2"]
    assert r.zscore(RECUR, "rec") == 120
    assert not r.exists("ql:j:rec-3")
    assert puts(pop(lua, 599, count=10)) == list(range(120, 600, 60))


def test_spawn_limit_shared_by_recurring_jobs(lua: Any, r: redis.Redis) -> None:
    """The limit is shared by all recurring jobs of the queue."""
    recur(lua, "r1")
    recur(lua, "r2")
    assert len(pop(lua, 120, count=3)) == 3
    spawned = [k for k in r.keys("ql:j:r*") if not str(k).endswith("-history")]
    assert len(spawned) == 3


@pytest.mark.parametrize(
    "interval,backlog,now,expected",
    [
        (60, 1, 600, [540, 600]),
        (60, 3, 1000, [840, 900, 960]),
        (100, 2, 250, [100, 200]),
        (100, 5, 250, [0, 100, 200]),
        (60, 0, 599, list(range(0, 600, 60))),
    ],
)
def test_backlog_arithmetic(lua: Any, interval: int, backlog: int, now: float,
                            expected: list[int]) -> None:
    """Skip runs beyond the backlog: s += ceil((now - s) / interval - backlog) * interval."""
    recur(lua, interval=interval, backlog=backlog)
    assert puts(pop(lua, now, count=20)) == expected


def test_backlog_next_run(lua: Any, r: redis.Redis) -> None:
    """After catching up, the next run is one interval after the last spawn."""
    recur(lua, backlog=1)
    pop(lua, 600, count=10)
    assert r.zscore(RECUR, "rec") == 660


def test_children_score_by_nominal_time(lua: Any, r: redis.Redis) -> None:
    """Score each child with its nominal spawn time."""
    recur(lua, priority=2)
    lua("peek", 130, "queue", 10)
    assert r.zscore(WORK, "rec-1") == pytest.approx(2.0)
    assert r.zscore(WORK, "rec-3") == pytest.approx(2 - 120 / 1e10)


def test_child_tags_indexed(lua: Any, r: redis.Redis) -> None:
    """Tag each child in `ql:t:<tag>` and count it in `ql:tags`."""
    recur(lua, tags=["t"])
    pop(lua, 60, count=5)
    assert sorted(r.zrange("ql:t:t", 0, -1)) == ["rec-1", "rec-2"]
    assert r.zscore("ql:tags", "t") == 2


def test_child_wait_counts_from_nominal_time(lua: Any) -> None:
    """The wait statistic of a child starts at its nominal spawn time."""
    recur(lua)
    pop(lua, 30)
    wait = lua.json("stats", 0, "queue", 0)["wait"]
    assert (wait["count"], wait["mean"], wait["histogram"][30]) == (1, 30, 1)


def test_peek_spawns(lua: Any, r: redis.Redis) -> None:
    """Peek spawns due children too."""
    recur(lua)
    jobs = lua.json("peek", 0, "queue", 5)
    assert [j["jid"] for j in jobs] == ["rec-1"]
    assert r.hget("ql:j:rec-1", "state") == "waiting"


@pytest.mark.parametrize("command", ["queues", "jobs", "length"])
def test_queries_do_not_spawn(lua: Any, r: redis.Redis, command: str) -> None:
    """Only pop and peek spawn."""
    recur(lua)
    args = {"queues": [], "jobs": ["scheduled", "queue"], "length": ["queue"]}[command]
    lua(command, 600, *args)
    assert not r.exists("ql:j:rec-1")


def test_paused_queue_does_not_spawn(lua: Any, r: redis.Redis) -> None:
    """A paused queue's pop returns at once, spawning nothing."""
    recur(lua)
    lua("pause", 0, "queue")
    assert pop(lua, 100) == []
    assert not r.exists("ql:j:rec-1")


def test_no_put_event_for_children(lua: Any, events: Any) -> None:
    """Children are spawned silently on ql:log."""
    recur(lua)
    events()
    lua("peek", 0, "queue", 5)
    assert [e for e in events() if e[0] == "ql:log"] == []


# -- recur.update -------------------------------------------------------------------------------


@pytest.mark.parametrize("name,value", [("priority", 7), ("retries", 9), ("backlog", 2)])
def test_update_numbers(lua: Any, name: str, value: int) -> None:
    """Store numeric options."""
    recur(lua)
    assert lua("recur.update", 0, "rec", name, value) == 1
    assert lua.json("recur.get", 0, "rec")[name] == value


def test_update_interval_shifts_next_run(lua: Any, r: redis.Redis) -> None:
    """Shift the next run by new - old interval."""
    recur(lua, offset=10)
    lua("recur.update", 0, "rec", "interval", 100)
    assert r.zscore(RECUR, "rec") == 50
    assert lua.json("recur.get", 0, "rec")["interval"] == 100


def test_update_data_and_klass(lua: Any) -> None:
    """Store data raw and klass."""
    recur(lua)
    lua("recur.update", 0, "rec", "data", '{"n": []}', "klass", "Other")
    rec = lua.json("recur.get", 0, "rec")
    assert (rec["data"], rec["klass"]) == ('{"n": []}', "Other")
    assert pop(lua, 0)[0]["klass"] == "Other"


def test_update_queue_moves_schedule(lua: Any, r: redis.Redis) -> None:
    """Move the entry, keeping its score, and register the queue."""
    recur(lua, offset=42)
    lua("recur.update", 5, "rec", "queue", "other")
    assert r.zscore(RECUR, "rec") is None
    assert r.zscore("ql:q:other-recur", "rec") == 42
    assert r.zscore("ql:queues", "other") == 5
    assert lua.json("recur.get", 0, "rec")["queue"] == "other"


def test_update_missing(lua: Any) -> None:
    """Refuse an unknown recurring job."""
    with pytest.raises(redis.ResponseError, match=r"Recur\(\): No recurring job nope"):
        lua("recur.update", 0, "nope", "priority", 1)


def test_update_unknown_option(lua: Any) -> None:
    """Refuse options other than the documented ones (tags included)."""
    recur(lua)
    with pytest.raises(redis.ResponseError, match='Unrecognized option "tags"'):
        lua("recur.update", 0, "rec", "tags", ["x"])


def test_update_missing_value(lua: Any) -> None:
    """Every option needs a value."""
    recur(lua)
    with pytest.raises(redis.ResponseError, match="No value provided for priority"):
        lua("recur.update", 0, "rec", "priority")


# -- recur.tag / recur.untag / unrecur ----------------------------------------------------------


def test_recur_tag(lua: Any, r: redis.Redis) -> None:
    """Add tags without duplicates and return the list as JSON."""
    recur(lua, tags=["a"])
    assert lua.json("recur.tag", 0, "rec", "b", "a", "b") == ["a", "b"]
    assert not r.exists("ql:t:b")
    assert pop(lua, 0)[0]["tags"] == ["a", "b"]


def test_recur_untag(lua: Any) -> None:
    """Remove tags; `{}` when none are left."""
    recur(lua, tags=["a", "b"])
    assert lua.json("recur.untag", 0, "rec", "a") == ["b"]
    assert lua("recur.untag", 0, "rec", "b") == "{}"


def test_recur_tag_missing(lua: Any) -> None:
    """Refuse to tag an unknown recurring job."""
    with pytest.raises(redis.ResponseError, match=r"Tag\(\): Job nope does not exist"):
        lua("recur.tag", 0, "nope", "a")
    with pytest.raises(redis.ResponseError, match=r"Untag\(\): Job nope does not exist"):
        lua("recur.untag", 0, "nope", "a")


def test_unrecur(lua: Any, r: redis.Redis) -> None:
    """Stop future spawns and keep spawned children."""
    recur(lua)
    pop(lua, 0)
    assert lua("unrecur", 1, "rec") == 1
    assert not r.exists("ql:r:rec")
    assert r.zscore(RECUR, "rec") is None
    assert r.exists("ql:j:rec-1")
    assert pop(lua, 1000, count=10) == []


def test_unrecur_unknown(lua: Any) -> None:
    """Unrecur of an unknown jid still replies 1."""
    assert lua("unrecur", 0, "nope") == 1


def test_jobs_recurring(lua: Any) -> None:
    """List recurring jids by next run, future ones included."""
    recur(lua, "late", offset=100)
    recur(lua, "soon", offset=1)
    assert lua("jobs", 0, "recurring", "queue") == ["soon", "late"]


def test_update_shorter_interval_spawns_earlier(lua: Any) -> None:
    """After shortening the interval, the next spawn happens at the shifted time."""
    recur(lua, interval=100, offset=100)
    assert pop(lua, 0) == []
    lua("recur.update", 1, "rec", "interval", 50)
    assert pop(lua, 49) == []
    assert [j["jid"] for j in pop(lua, 50)] == ["rec-1"]


def test_update_queue_spawns_in_new_queue(lua: Any) -> None:
    """A moved schedule spawns in the new queue at its time."""
    recur(lua, offset=30)
    assert pop(lua, 0, queue="other") == []
    lua("recur.update", 1, "rec", "queue", "other")
    assert [j["jid"] for j in pop(lua, 30, queue="other")] == ["rec-1"]
    assert pop(lua, 30) == []


def test_rerecur_keeps_next_run(lua: Any) -> None:
    """Re-issuing recur leaves the next run where it was: `offset` places new templates."""
    recur(lua, offset=1000)
    assert pop(lua, 0) == []
    recur(lua, now=1, offset=4)
    assert pop(lua, 5) == []
    assert [j["jid"] for j in pop(lua, 1000)] == ["rec-1"]


def test_child_remaining_and_state(lua: Any) -> None:
    """A spawned child starts with remaining = retries, state waiting."""
    recur(lua, retries=4)
    child = lua.json("peek", 0, "queue", 1)[0]
    assert (child["state"], child["remaining"], child["retries"], child["worker"]) == (
        "waiting", 4, 4, "")


def test_spawn_never_overwrites_an_existing_job(lua: Any) -> None:
    """Never overwrite an earlier child when a recurring job is recreated."""
    # bad-input case 17: qless-core overwrote them.
    recur(lua)
    assert [j["jid"] for j in pop(lua, 0)] == ["rec-1"]
    lua("unrecur", 1, "rec")
    recur(lua, now=2)
    jobs = pop(lua, 2)
    assert [j["jid"] for j in jobs] != ["rec-1"]
    assert lua.json("get", 2, "rec-1")["state"] == "running"


def test_pop_by_slightly_slower_clock_spawns_due_runs(lua: Any) -> None:
    """Spawning examines [0, now] even just after a pop with a later clock."""
    recur(lua, interval=30)
    assert [j["jid"] for j in pop(lua, 100)] == ["rec-1"]
    # A client 0.5 s behind: the run at 30 is due for it too.
    assert [j["jid"] for j in pop(lua, 99.5)] == ["rec-2"]
