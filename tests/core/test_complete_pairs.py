"""complete.reserve's paired form: earlier completions ride with the call's own (worker.lua,
complete.lua). Every argument is checked before the first write; each job's result comes back
on its own."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument, LostLockError
from django_qless.core.hotpath import decode_worker_reply

__all__: list[str] = []

RS = "\x1e"


_PUTS = [0.0]


def put(lua: Any, jid: str, queue: str = "queue") -> None:
    """Put one job (each a little later than the last: popped in this order)."""
    _PUTS[0] += 0.001
    lua("put", _PUTS[0] % 0.5, "worker", queue, jid, "klass", {}, 0)


def pop(lua: Any, queue: str, count: int, now: float = 1, worker: str = "worker") -> list[str]:
    """Pop `count` jobs of `queue` as `worker`; return their jids."""
    return [j["jid"] for j in lua.json("pop", now, queue, worker, count)]


def states(raw: Any) -> list[str]:
    """The per-job results of a paired reply (decoded as the client does)."""
    return str(decode_worker_reply(raw)["state"]).split(RS)


def reserved(raw: Any) -> list[str]:
    """The jids a complete.reserve reply reserved."""
    jobs = decode_worker_reply(raw)["jobs"]
    return [j["jid"] for j in jobs] if jobs else []


def state(lua: Any, jid: str) -> str:
    """A job's state."""
    return str(lua.json("get", 9, jid)["state"])


def test_two_completions_in_one_call(lua: Any) -> None:
    """Both jobs complete; each reports its state; the call reserves the next."""
    for jid in ("a", "b", "c"):
        put(lua, jid)
    assert pop(lua, "queue", 2) == ["a", "b"]
    raw = lua("complete.reserve", 2, "+1", "a", "queue", "{}", "",
              "b", "worker", "queue", "{}", "", 1, "queue")
    assert states(raw) == ["complete", "complete"]
    assert reserved(raw) == ["c"]
    assert state(lua, "a") == state(lua, "b") == "complete"


def test_mixed_queues(lua: Any) -> None:
    """The earlier job may be in another queue than the last."""
    put(lua, "a", "one")
    put(lua, "b", "two")
    put(lua, "c", "two")
    pop(lua, "one", 1)
    pop(lua, "two", 1)
    raw = lua("complete.reserve", 2, "+1", "a", "one", '{"x": 1}', "",
              "b", "worker", "two", "{}", "", 1, "two")
    assert states(raw) == ["complete", "complete"]
    assert reserved(raw) == ["c"]
    assert lua.json("get", 9, "a")["data"] == '{"x": 1}'


def test_worker_done_count_counts_each_job(lua: Any, r: redis.Redis) -> None:
    """The worker's `done` count (dashboard) grows by every job the call completed."""
    for jid in ("a", "b", "c"):
        put(lua, jid)
    pop(lua, "queue", 3)
    lua("complete.reserve", 2, "+2", "a", "queue", "{}", "", "b", "queue", "{}", "",
        "c", "worker", "queue", "{}", "", 0, "queue")
    info = lua.json("workers", 3)
    assert [w["name"] for w in info] == ["worker"]
    assert str(r.hget("ql:w:worker:info", "done")) == "3"


def test_earlier_lost_lock_is_reported_and_the_last_completes(lua: Any) -> None:
    """An earlier job no longer the worker's is left alone and reported; the other completes."""
    put(lua, "a")
    put(lua, "b")
    pop(lua, "queue", 2)
    # `a` is handed to another worker meanwhile (its lease expired and it was popped again).
    lua("retry", 1, "a", "queue", "worker", 0)
    assert pop(lua, "queue", 1, now=2, worker="other") == ["a"]
    raw = lua("complete.reserve", 3, "+1", "a", "queue", "{}", "",
              "b", "worker", "queue", "{}", "", 0, "queue")
    first, second = states(raw)
    assert first.startswith("!") and "another worker" in first
    assert second == "complete"
    assert state(lua, "a") == "running" and lua.json("get", 9, "a")["worker"] == "other"
    assert state(lua, "b") == "complete"


def test_a_lost_last_job_is_reported_and_the_earlier_completes(lua: Any) -> None:
    """The call's own job lost meanwhile is reported too; the earlier one completes and the
    reserve still runs."""
    for jid in ("a", "b"):
        put(lua, jid)
    pop(lua, "queue", 2)
    lua("retry", 1, "b", "queue", "worker", 0)
    assert pop(lua, "queue", 1, now=2, worker="other") == ["b"]
    put(lua, "c")
    raw = lua("complete.reserve", 3, "+1", "a", "queue", "{}", "",
              "b", "worker", "queue", "{}", "", 1, "queue")
    first, second = states(raw)
    assert first == "complete"
    assert second.startswith("!") and "another worker" in second
    assert reserved(raw) == ["c"]
    assert lua.json("get", 9, "b")["worker"] == "other"


def test_every_job_lost(lua: Any, r: redis.Redis) -> None:
    """Nothing to complete: each job reported, nothing written to them, `done` not counted."""
    for jid in ("a", "b"):
        put(lua, jid)
    pop(lua, "queue", 2)
    raw = lua("complete.reserve", 3, "+1", "a", "queue", "{}", "",
              "b", "thief", "queue", "{}", "", 0, "queue")
    assert [s[:1] for s in states(raw)] == ["!", "!"]
    assert state(lua, "a") == state(lua, "b") == "running"
    assert not r.exists("ql:w:thief:info")


@pytest.mark.parametrize(("head", "match"), [
    (["+0"], "must be \\+ and an integer"),
    (["+17"], "must be \\+ and an integer"),
    (["+x"], "must be \\+ and an integer"),
    (["+3", "a", "queue", "{}", ""], "fewer were sent"),
    (["+1", "a b", "queue", "{}", ""], "jid"),
    (["+1", "a", "", "{}", ""], "queue"),
    (["+1", "a", "queue", "{not json", ""], "data"),
    (["+1", "a", "queue", "{}", "bad token!"], "token"),
    (["+1", "b", "queue", "{}", ""], "completed twice"),
    (["+2", "a", "queue", "{}", "", "a", "queue", "{}", ""], "completed twice"),
])
def test_a_bad_argument_refuses_everything(lua: Any, head: list[str], match: str) -> None:
    """Any bad argument of any completion refuses the whole call before the first write."""
    for jid in ("a", "b", "c"):
        put(lua, jid)
    pop(lua, "queue", 2)
    with pytest.raises(redis.ResponseError, match=match):
        lua("complete.reserve", 2, *head, "b", "worker", "queue", "{}", "", 1, "queue")
    assert state(lua, "a") == state(lua, "b") == "running"
    assert state(lua, "c") == "waiting"


def test_a_repeat_reports_the_recorded_states(lua: Any) -> None:
    """With attempt tokens, sending the same call again (a lost reply) changes nothing."""
    put(lua, "a")
    put(lua, "b")
    pop(lua, "queue", 2)
    args = ["+1", "a", "queue", "{}", "ta", "b", "worker", "queue", "{}", "tb", 0, "queue"]
    assert states(lua("complete.reserve", 2, *args)) == ["complete", "complete"]
    assert states(lua("complete.reserve", 3, *args)) == ["complete", "complete"]
    history = lua.json("get", 9, "a")["history"]
    assert [h["what"] for h in history].count("done") == 1


def test_client_pair_results(client: Client) -> None:
    """The client's complete_many_and_reserve: per-job results, the lost one as its error."""
    queue = client.queues["q"]
    for n in range(3):
        queue.put("klass", {}, jid=f"j{n}")
    first, second = client.reserve(["q"], 2, worker="w")[0]
    client.call("retry", first.jid, "q", "w", 0)  # no longer w's
    results, jobs, _ = client.complete_many_and_reserve([first, second], ["q"], 1)
    assert isinstance(results[0], LostLockError)
    assert results[1] == "complete"
    assert [j.jid for j in jobs] in (["j0"], ["j2"])
    with pytest.raises(InvalidArgument):
        client.complete_many_and_reserve([], ["q"], 1)


def test_client_pair_last_lost(client: Client) -> None:
    """The last job lost: reported as its error, the earlier one completed."""
    queue = client.queues["q"]
    for n in range(2):
        queue.put("klass", {}, jid=f"j{n}")
    first, second = client.reserve(["q"], 2, worker="w")[0]
    client.call("retry", second.jid, "q", "w", 0)
    results, _, _ = client.complete_many_and_reserve([first, second], ["q"], 0)
    assert results[0] == "complete"
    assert isinstance(results[1], LostLockError)
    assert client.jobs[first.jid].state == "complete"


@pytest.mark.parametrize("deferred", [False, True])
def test_a_pair_resends_its_queues_after_the_engine_forgot_the_list(
    client: Client, r: redis.Redis, deferred: bool
) -> None:
    """A queue list named by id (held by the engine) that the engine lost: the paired call is
    refused before any write and sent again with the names."""
    listed = ["p0", "p1", "p2"]
    for _ in range(3):  # (names, then id and names, then the id alone)
        assert client.reserve(listed, 1, worker="w")[0] == []
    client.call("config.get", "heartbeat")  # (decides how the engine is called)
    if client.channel.mode == "script":
        pytest.skip("no lists held across calls under EVALSHA")
    queue = client.queues["p1"]
    jids = [queue.put("klass", {}, jid=f"j{n}", priority=3 - n) for n in range(3)]
    first, second = client.reserve(listed, 2, worker="w")[0]
    r.function_flush()
    client.call("config.get", "heartbeat")  # (loads the engine again, without any list)
    if deferred:
        results, more, _ = client.send_complete_many([first, second], listed, 1).result()
    else:
        results, more, _ = client.complete_many_and_reserve([first, second], listed, 1)
    assert results == ["complete", "complete"]
    assert [j.jid for j in more] == [jids[2]]


def earlier_head(jobs: list[tuple[str, str]], token: str = "") -> list[Any]:
    """The `+N (jid queue data token){N}` head of a paired call for (jid, queue) pairs."""
    head: list[Any] = [f"+{len(jobs)}"]
    for jid, queue in jobs:
        head += [jid, queue, "{}", token and f"{token}{jid}"]
    return head


def test_many_completions_in_one_call(lua: Any, r: redis.Redis) -> None:
    """Eight earlier completions in two queues and the call's own: each job is out of its
    queue's lock set and the worker's set, in ql:completed at the call's time, with its
    whole history; the worker's count grows by nine; the call reserves the next."""
    jobs = [(f"j{n}", "one" if n % 3 else "two") for n in range(9)]
    for jid, queue in jobs:
        put(lua, jid, queue)
    put(lua, "next", "one")
    pop(lua, "one", 6)
    pop(lua, "two", 3)
    raw = lua("complete.reserve", 5, *earlier_head(jobs[:8]),
              "j8", "worker", "one", "{}", "", 1, "one")
    assert states(raw) == ["complete"] * 9
    assert reserved(raw) == ["next"]
    assert r.zrange("ql:q:one-locks", 0, -1) == ["next"]
    assert r.zcard("ql:q:two-locks") == 0
    assert r.zrange("ql:w:worker:jobs", 0, -1) == ["next"]
    assert r.zscore("ql:completed", "j0") == r.zscore("ql:completed", "j8") == 5
    assert r.zcard("ql:completed") == 9
    for jid, _ in jobs:
        got = lua.json("get", 9, jid)
        assert got["state"] == "complete" and got["worker"] == ""
        assert [h["what"] for h in got["history"]] == ["put", "popped", "done"]
    assert str(r.hget("ql:w:worker:info", "done")) == "9"


@pytest.mark.parametrize("lost", [0, 3, 7])
def test_a_lost_lock_among_many_is_left_alone(lua: Any, r: redis.Redis, lost: int) -> None:
    """One of eight earlier jobs handed to another worker meanwhile: reported at its place,
    its lock and the other worker's set keep it; every other job completes."""
    jobs = [(f"j{n}", "queue") for n in range(9)]
    for jid, _ in jobs:
        put(lua, jid)
    pop(lua, "queue", 9)
    victim = f"j{lost}"
    lua("retry", 1, victim, "queue", "worker", 0)
    assert pop(lua, "queue", 1, now=2, worker="other") == [victim]
    raw = lua("complete.reserve", 3, *earlier_head(jobs[:8]),
              "j8", "worker", "queue", "{}", "", 0, "queue")
    results = states(raw)
    assert results[lost].startswith("!") and "another worker" in results[lost]
    assert [s for i, s in enumerate(results) if i != lost] == ["complete"] * 8
    assert r.zrange("ql:q:queue-locks", 0, -1) == [victim]
    assert r.zrange("ql:w:other:jobs", 0, -1) == [victim]
    assert r.zcard("ql:w:worker:jobs") == 0
    assert state(lua, victim) == "running"
    assert not r.zscore("ql:completed", victim)
    assert str(r.hget("ql:w:worker:info", "done")) == "8"


@pytest.mark.parametrize("bad", [
    ["j7", "queue", "{not json", ""],
    ["j7", "queue", "{}", "bad token!"],
    ["j7", "bad queue", "{}", ""],
    ["j0", "queue", "{}", ""],
])
def test_a_bad_last_earlier_argument_refuses_all_of_many(
    lua: Any, r: redis.Redis, bad: list[str]
) -> None:
    """A bad argument of the eighth earlier completion (or a repeat of the first) refuses the
    whole call: none of the nine jobs is written, no set changes."""
    jobs = [(f"j{n}", "queue") for n in range(9)]
    for jid, _ in jobs:
        put(lua, jid)
    pop(lua, "queue", 9)
    locks = r.zrange("ql:q:queue-locks", 0, -1, withscores=True)
    head = earlier_head(jobs[:7]) + bad
    head[0] = "+8"
    with pytest.raises(redis.ResponseError):
        lua("complete.reserve", 2, *head, "j8", "worker", "queue", "{}", "", 1, "queue")
    assert all(state(lua, jid) == "running" for jid, _ in jobs)
    assert r.zrange("ql:q:queue-locks", 0, -1, withscores=True) == locks
    assert r.zcard("ql:w:worker:jobs") == 9
    assert not r.exists("ql:completed")


def test_retention_after_many_completions(lua: Any, r: redis.Redis) -> None:
    """jobs-history-count holds after a call that completes several jobs: the set is trimmed
    once the call's completions are in it, and the trimmed jobs are deleted."""
    lua("config.set", 1, "jobs-history-count", 2)
    jobs = [(f"j{n}", "queue") for n in range(5)]
    for jid, _ in jobs:
        put(lua, jid)
    pop(lua, "queue", 5)
    raw = lua("complete.reserve", 2, *earlier_head(jobs[:4]),
              "j4", "worker", "queue", "{}", "", 0, "queue")
    assert states(raw) == ["complete"] * 5
    kept = r.zrange("ql:completed", 0, -1)
    assert len(kept) == 2
    for jid, _ in jobs:
        assert bool(r.exists(f"ql:j:{jid}")) == (jid in kept)


def test_new_earlier_completions_with_a_recorded_last(lua: Any, r: redis.Redis) -> None:
    """The call's own job completed already under its token (a lost reply), the earlier ones
    not: they complete now and leave the sets; the own job keeps its recorded state."""
    jobs = [(f"j{n}", "queue") for n in range(4)]
    for jid, _ in jobs:
        put(lua, jid)
    pop(lua, "queue", 4)
    lua("complete.reserve", 2, "j3", "worker", "queue", "{}", "t3", 0, "queue")
    raw = lua("complete.reserve", 3, *earlier_head(jobs[:3]),
              "j3", "worker", "queue", "{}", "t3", 1, "queue")
    assert states(raw) == ["complete"] * 4
    assert r.zcard("ql:q:queue-locks") == r.zcard("ql:w:worker:jobs") == 0
    assert r.zcard("ql:completed") == 4
    assert all(state(lua, jid) == "complete" for jid, _ in jobs)


def test_dependents_of_many_completions(lua: Any, r: redis.Redis) -> None:
    """Dependents of jobs completed in one paired call: a job waiting on two of them and a
    job waiting on one are released (once: one `put` entry each); a job waiting on a job
    not completed stays."""
    jobs = [(f"j{n}", "queue") for n in range(4)]
    for jid, _ in jobs:
        put(lua, jid)
    pop(lua, "queue", 4)
    put(lua, "late")
    lua("put", 1, "worker", "queue", "both", "klass", {}, 0, "depends", ["j0", "j3"])
    lua("put", 1, "worker", "queue", "one", "klass", {}, 0, "depends", ["j1"])
    lua("put", 1, "worker", "queue", "other", "klass", {}, 0, "depends", ["late"])
    assert state(lua, "both") == state(lua, "one") == state(lua, "other") == "depends"
    raw = lua("complete.reserve", 2, *earlier_head(jobs[:3]),
              "j3", "worker", "queue", "{}", "", 0, "queue")
    assert states(raw) == ["complete"] * 4
    assert state(lua, "both") == state(lua, "one") == "waiting"
    assert state(lua, "other") == "depends"
    for jid in ("both", "one"):
        whats = [h["what"] for h in lua.json("get", 9, jid)["history"]]
        assert whats.count("put") == 1, whats
    assert not r.exists("ql:j:j0-dependents", "ql:j:j1-dependents", "ql:j:j3-dependents")
