"""The older `put` form (no worker argument), an empty worker, and what stock clients see in
`queues` counts (docs/compatibility.md, "Older clients")."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from tests.core.conftest import Lua, snapshot

__all__: list[str] = []

# What qless-core's `queues` reports for a queue, and nothing more.
QLESS_COUNT_KEYS = {"name", "waiting", "running", "stalled", "scheduled", "depends",
                    "recurring", "paused"}


def comparable(job: dict[str, Any]) -> dict[str, Any]:
    """A job object without its jid, for comparing two jobs put the same way."""
    out = dict(job)
    out.pop("jid")
    return out


def raw_hash(r: redis.Redis, jid: str) -> dict[str, str]:
    """The job hash without the jid field."""
    h = dict(r.hgetall(f"ql:j:{jid}"))
    h.pop("jid", None)  # (a lean record, in a shard keyspace, has none)
    return h


# -- the older form ----------------------------------------------------------------------------


@pytest.mark.parametrize("delay,pairs", [
    (0, []),
    (0, ["priority", 3, "tags", '["a", "b"]', "retries", 2, "depends", "[]"]),
    (30, ["priority", -1]),
    (0, ["depends", '["dep"]']),
])
def test_older_form_is_the_current_form_with_no_worker(
    lua: Lua, r: redis.Redis, delay: int, pairs: list[Any]
) -> None:
    """`put queue jid klass data delay [pairs]` writes exactly what worker '' would."""
    lua("put", 1, "w", "q", "dep", "K", "{}", 0)
    assert lua("put", 5, "q", "old", "K", '{"x": [1]}', delay, *pairs) == "old"
    assert lua("put", 5, "", "q", "new", "K", '{"x": [1]}', delay, *pairs) == "new"
    assert raw_hash(r, "old") == raw_hash(r, "new")
    assert comparable(lua.json("get", 6, "old")) == comparable(lua.json("get", 6, "new"))
    for kind in ("work", "scheduled", "depends"):
        key = f"ql:q:q-{kind}"
        assert r.zscore(key, "old") == r.zscore(key, "new")


def test_older_form_moves_a_running_job_and_tells_its_worker(
    lua: Lua, r: redis.Redis, events: Any
) -> None:
    """A move by an older client takes the job from its worker, as qless-core did."""
    lua("put", 1, "w", "q", "j", "K", "{}", 0)
    lua("pop", 2, "q", "w", 1)
    events()
    assert lua("put", 3, "other", "j", "K", '{"v": 2}', 0) == "j"
    got = events()
    assert ("ql:w:w", '{"jid":"j","event":"lock_lost","worker":"w"}') in got
    job = lua.json("get", 4, "j")
    assert (job["queue"], job["state"], job["worker"], job["data"]) == (
        "other", "waiting", "", '{"v": 2}')
    assert r.zcard("ql:w:w:jobs") == 0 and r.zcard("ql:q:q-locks") == 0


def test_older_form_what_qless_py_0_11_4_sends(lua: Lua) -> None:
    """Queue.put and Job.move of qless-py 0.11.4, argument for argument."""
    lua("put", 1, "foo", "jid", "test.Foo", '{"a": 1}', 0, "priority", 0, "tags", "[]",
        "retries", 5, "depends", "[]")
    lua("put", 2, "bar", "jid", "test.Foo", '{"a": 1}', 0, "depends", "[]")
    job = lua.json("get", 3, "jid")
    assert (job["queue"], job["klass"], job["retries"]) == ("bar", "test.Foo", 5)
    assert [e["what"] for e in job["history"]] == ["put", "put"]


# -- telling the forms apart -------------------------------------------------------------------


def test_klass_starting_with_a_brace_is_still_the_current_form(lua: Lua) -> None:
    """The 6th argument is data (a JSON object): current form, whatever the klass looks like."""
    lua("put", 1, "w", "q", "j", '{"k": 1}', "{}", 0)
    job = lua.json("get", 2, "j")
    assert (job["queue"], job["klass"], job["data"]) == ("q", '{"k": 1}', "{}")


def test_data_with_leading_blanks_is_still_the_current_form(lua: Lua) -> None:
    """Blanks before the `{` of data do not make the call look older."""
    lua("put", 1, "w", "q", "j", "{K}", '  {"a": 1}', 0)
    assert lua.json("get", 2, "j")["data"] == '  {"a": 1}'


@pytest.mark.parametrize("args,message", [
    # older form (5th argument a JSON object, 6th not): its own argument names in errors
    (["q", "j", "K", "{}", "soon"], 'Put(): Arg "delay" not a number: soon'),
    (["q", "j", "K", "{}"], 'Put(): Arg "delay" not a number: nil'),
    (["q", "j", "K", "{}", -1], 'Put(): Arg "delay" must be >= 0: -1'),
    (["q", "j", "K", "{bad", 0], 'Put(): Arg "data" not JSON'),
    (["q", "j", "K", "{}", 0, "priority"], "Put(): Odd number of additional args"),
    (["q", "j", "K", "{}", 0, "priority", "high"], 'Put(): Arg "priority" not a number: high'),
    (["a:b", "j", "K", "{}", 0], 'Put(): Arg "queue" invalid: a:b'),
    (["q", "a:b", "K", "{}", 0], 'Put(): Arg "jid" invalid: a:b'),
    # a current-form call whose data is not an object but whose klass is: read as the older
    # form, so the bad data is reported as a bad delay
    (["w", "q", "j", "{}", "[1]", 0], 'Put(): Arg "delay" not a number: [1]'),
    # anything else is the current form, with its errors
    (["w", "q", "j", "K", "[1]", 0], 'Put(): Arg "data" must be a JSON object'),
    (["q", "j", "K", "[1]", 0], 'Put(): Arg "data" must be a JSON object'),
    (["w", "q", "j", "K", "{}", 0, "priority"], "Put(): Odd number of additional args"),
    (["w", "q"], 'Put(): Arg "jid" missing'),
    ([], 'Put(): Arg "worker" missing'),
])
def test_bad_puts_are_refused_before_any_write(
    lua: Lua, r: redis.Redis, args: list[Any], message: str
) -> None:
    """Either form is checked completely before its first write."""
    lua("put", 1, "w", "q", "other", "K", "{}", 0)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError) as info:
        lua("put", 2, *args)
    assert message in str(info.value)
    assert snapshot(r) == before


def test_requeue_takes_only_the_current_form(lua: Lua, r: redis.Redis) -> None:
    """requeue came with the worker argument: an older-form call is refused, not guessed."""
    lua("put", 1, "w", "q", "j", "K", "{}", 0)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match='Requeue\\(\\): Arg "data" must be a JSON'):
        lua("requeue", 2, "q2", "j", "K", "{}", 0)
    assert snapshot(r) == before


# -- an empty worker ---------------------------------------------------------------------------


def test_empty_worker_is_accepted(lua: Lua) -> None:
    """A client moving a job (not a worker) may send worker ''."""
    assert lua("put", 1, "", "q", "j", "K", "{}", 0) == "j"
    assert lua("requeue", 2, "", "q2", "j", "K", "{}", 0) == "j"
    job = lua.json("get", 3, "j")
    assert (job["queue"], job["state"], job["worker"]) == ("q2", "waiting", "")


def test_empty_worker_moving_a_running_job_tells_its_worker(
    lua: Lua, r: redis.Redis, events: Any
) -> None:
    """Worker '' is nobody, so the job's worker loses it."""
    lua("put", 1, "w", "q", "j", "K", "{}", 0)
    lua("pop", 2, "q", "w", 1)
    events()
    lua("put", 3, "", "q", "j", "K", "{}", 0)
    assert ("ql:w:w", '{"jid":"j","event":"lock_lost","worker":"w"}') in events()
    assert r.zcard("ql:w:w:jobs") == 0
    with pytest.raises(redis.ResponseError, match="not currently running|not running"):
        lua("heartbeat", 4, "j", "w", "{}")


def test_empty_worker_in_put_many(lua: Lua) -> None:
    """put.many takes the same worker values as put."""
    assert lua.json("put.many", 1, "", "q", 1, "a", "K", "{}", 0, 0) == ["a"]
    assert lua.json("get", 2, "a")["state"] == "waiting"


# -- queue counts as stock clients see them ----------------------------------------------------


def test_queue_counts_have_qless_cores_keys(lua: Lua) -> None:
    """No "throttled" key while the queue has no throttled job (stock clients compare keys)."""
    lua("put", 1, "w", "q", "j", "K", "{}", 0)
    assert set(lua.json("queues", 2, "q")) == QLESS_COUNT_KEYS
    assert [set(c) for c in lua.json("queues", 2)] == [QLESS_COUNT_KEYS]


def test_queue_counts_show_throttled_jobs(lua: Lua) -> None:
    """A queue with throttled jobs reports them (only our throttle commands make any)."""
    lua("throttle.set", 1, "th", 1)
    lua("put", 1, "w", "q", "a", "K", "{}", 0, "throttles", '["th"]')
    lua("put", 1, "w", "q", "b", "K", "{}", 0, "throttles", '["th"]')
    lua("pop", 2, "q", "w", 2)
    counts = lua.json("queues", 3, "q")
    assert set(counts) == QLESS_COUNT_KEYS | {"throttled"}
    assert (counts["throttled"], counts["running"]) == (1, 1)


def test_client_counts_always_have_throttled(client: Client) -> None:
    """Our client fills in the 0 the engine leaves out."""
    client.queues["q"].put("K", {})
    assert client.queues["q"].counts["throttled"] == 0
    assert client.queues.counts[0]["throttled"] == 0
