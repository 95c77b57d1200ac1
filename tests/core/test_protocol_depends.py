"""Conformance of dependencies and the `depends` command."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from tests.core.conftest import snapshot

__all__: list[str] = []

DEPS = "ql:q:queue-depends"
WORK = "ql:q:queue-work"


def put(lua: Any, jid: str, *, now: float = 0, delay: float = 0, **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", "queue", jid, "klass", {}, delay, *pairs)


def finish(lua: Any, jid: str, now: float = 0) -> None:
    """Pop (as the only job wanted) and complete `jid`."""
    jobs = lua.json("pop", now, "queue", "worker", 1)
    assert jobs[0]["jid"] == jid
    assert lua("complete", now, jid, "worker", "queue", {}) == "complete"


def state(lua: Any, jid: str) -> str:
    """Return the job's state."""
    return str(lua.json("get", 0, jid)["state"])


def test_chain_runs_in_order(lua: Any) -> None:
    """a -> b -> c run one after another."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "c", depends=["b"])
    assert (state(lua, "b"), state(lua, "c")) == ("depends", "depends")
    finish(lua, "a", 1)
    assert (state(lua, "b"), state(lua, "c")) == ("waiting", "depends")
    finish(lua, "b", 2)
    assert state(lua, "c") == "waiting"
    finish(lua, "c", 3)


def test_waits_for_every_dependency(lua: Any) -> None:
    """A job with two dependencies waits for both."""
    put(lua, "a")
    put(lua, "b", now=1)
    put(lua, "c", depends=["a", "b"])
    finish(lua, "a", 2)
    assert state(lua, "c") == "depends"
    finish(lua, "b", 3)
    assert state(lua, "c") == "waiting"


def test_fan_out(lua: Any) -> None:
    """Completing one job releases all its dependents."""
    put(lua, "a")
    for jid in ("b", "c", "d"):
        put(lua, jid, depends=["a"])
    assert sorted(lua.json("get", 0, "a")["dependents"]) == ["b", "c", "d"]
    finish(lua, "a", 1)
    assert [state(lua, j) for j in ("b", "c", "d")] == ["waiting"] * 3


def test_depends_jobs_are_not_popped(lua: Any) -> None:
    """Jobs in depends are never handed out."""
    put(lua, "a")
    put(lua, "b", now=1, depends=["a"], priority=10)
    jobs = lua.json("pop", 2, "queue", "worker", 5)
    assert [j["jid"] for j in jobs] == ["a"]


def test_released_dependent_history_unchanged(lua: Any) -> None:
    """Release from depends writes no put history (promotion does not touch history)."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    finish(lua, "a", 1)
    assert [h["what"] for h in lua.json("get", 1, "b")["history"]] == ["put"]


# -- depends on ---------------------------------------------------------------------------------


def test_depends_on_adds(lua: Any, r: redis.Redis) -> None:
    """Add dependencies to a job already in depends."""
    put(lua, "a")
    put(lua, "c")
    put(lua, "b", depends=["a"])
    assert lua("depends", 0, "b", "on", "c") == 1
    assert r.smembers("ql:j:b-dependencies") == {"a", "c"}
    assert r.smembers("ql:j:c-dependents") == {"b"}


def test_depends_on_ignores_missing_and_complete(lua: Any, r: redis.Redis) -> None:
    """Only existing, non-complete jobs become dependencies."""
    put(lua, "done")
    finish(lua, "done", 1)
    put(lua, "a", now=2)
    put(lua, "b", now=3, depends=["a"])
    lua("depends", 4, "b", "on", "nope", "done")
    assert r.smembers("ql:j:b-dependencies") == {"a"}
    assert not r.exists("ql:j:nope-dependents")


def test_depends_on_waiting_job_refused(lua: Any) -> None:
    """The job must be in the depends state."""
    put(lua, "a")
    put(lua, "b")
    with pytest.raises(redis.ResponseError, match="not in the depends state: waiting"):
        lua("depends", 0, "b", "on", "a")


def test_depends_missing_job(lua: Any) -> None:
    """A missing job is not in the depends state either."""
    with pytest.raises(redis.ResponseError, match=r"Depends\(\): Job nope not in the depends"):
        lua("depends", 0, "nope", "on", "a")


def test_depends_bad_command(lua: Any) -> None:
    """The sub-command must be on or off."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    with pytest.raises(redis.ResponseError, match='Argument "command" must be "on" or "off"'):
        lua("depends", 0, "b", "sideways", "a")


# -- depends off --------------------------------------------------------------------------------


def test_depends_off_last_releases(lua: Any, r: redis.Redis) -> None:
    """Removing the last dependency moves the job to work."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    assert lua("depends", 5, "b", "off", "a") == 1
    assert state(lua, "b") == "waiting"
    assert r.zscore(DEPS, "b") is None
    assert r.zscore(WORK, "b") == pytest.approx(-5 / 1e10)
    assert not r.sismember("ql:j:a-dependents", "b")


def test_depends_off_partial(lua: Any, r: redis.Redis) -> None:
    """Removing one of two dependencies keeps the job in depends."""
    put(lua, "a")
    put(lua, "c")
    put(lua, "b", depends=["a", "c"])
    lua("depends", 0, "b", "off", "a")
    assert state(lua, "b") == "depends"
    assert r.smembers("ql:j:b-dependencies") == {"c"}


def test_depends_off_all(lua: Any, r: redis.Redis) -> None:
    """`off all` drops every dependency in both directions."""
    put(lua, "a")
    put(lua, "c")
    put(lua, "b", depends=["a", "c"])
    lua("depends", 1, "b", "off", "all")
    assert state(lua, "b") == "waiting"
    assert not r.exists("ql:j:b-dependencies")
    assert not r.exists("ql:j:a-dependents")
    assert not r.exists("ql:j:c-dependents")


def test_fix_depends_off_honours_delay(lua: Any, r: redis.Redis) -> None:
    """A pending delay survives `depends off` (docs/engine.md fix)."""
    put(lua, "a")
    put(lua, "b", now=0, delay=100, depends=["a"])
    lua("depends", 10, "b", "off", "all")
    assert r.zscore("ql:q:queue-scheduled", "b") == 100
    assert r.zscore(WORK, "b") is None
    assert state(lua, "b") == "scheduled"


# -- edge cases ---------------------------------------------------------------------------------


def test_canceling_dependent_unblocks_nothing(lua: Any, r: redis.Redis) -> None:
    """Canceling the dependent leaves the dependency free to be canceled."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    lua("cancel", 0, "b")
    assert lua("cancel", 0, "a") == ["a"]
    assert not r.exists("ql:j:a")


def test_failed_dependency_keeps_dependent_waiting(lua: Any) -> None:
    """Only completion releases a dependent."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    lua("pop", 0, "queue", "worker", 1)
    lua("fail", 1, "a", "worker", "grp", "msg")
    assert state(lua, "b") == "depends"


def test_requeued_dependency_still_blocks(lua: Any) -> None:
    """Re-putting a dependency does not release its dependents."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "a", now=1)
    assert state(lua, "b") == "depends"
    finish(lua, "a", 2)
    assert state(lua, "b") == "waiting"


def test_self_dependency_refused(lua: Any, r: redis.Redis) -> None:
    """A job may not depend on itself (docs/engine.md)."""
    with pytest.raises(redis.ResponseError, match='Arg "depends"'):
        put(lua, "a", depends=["a"])
    assert not r.exists("ql:j:a")


def test_fix_depends_off_delay_then_pop(lua: Any) -> None:
    """The job released by `depends off` into `-scheduled` is popped at its time."""
    put(lua, "a")
    put(lua, "b", now=0, delay=100, depends=["a"])
    lua("pop", 1, "other", "worker", 1)
    assert lua.json("pop", 2, "queue", "worker", 1)[0]["jid"] == "a"
    assert lua("pop", 3, "queue", "worker", 1) == "{}"
    lua("depends", 10, "b", "off", "all")
    assert lua("pop", 99, "queue", "worker", 1) == "{}"
    assert lua.json("pop", 100, "queue", "worker", 1)[0]["jid"] == "b"


def test_release_with_past_delay_goes_through_scheduled(lua: Any, r: redis.Redis) -> None:
    """Send a released dependent with a past remembered time through `-scheduled`."""
    # Delayed dependent: ZADD scheduled <b.scheduled>, state scheduled; the next pop promotes it.
    put(lua, "a")
    put(lua, "b", now=0, delay=10, depends=["a"])
    finish(lua, "a", 50)
    assert r.zscore("ql:q:queue-scheduled", "b") == 10
    assert state(lua, "b") == "scheduled"
    assert lua.json("pop", 51, "queue", "worker", 1)[0]["jid"] == "b"


def test_released_delayed_dependent_pops_at_its_time(lua: Any) -> None:
    """A dependent released into `-scheduled` with a future time pops at that time."""
    put(lua, "a")
    put(lua, "b", now=0, delay=100, depends=["a"])
    finish(lua, "a", 5)
    assert lua("pop", 99, "queue", "worker", 1) == "{}"
    assert lua.json("pop", 100, "queue", "worker", 1)[0]["jid"] == "b"


# -- cycles (docs/engine.md: refused before any write) -----------------------------------------


def test_fix_put_refuses_a_dependency_cycle(lua: Any, r: redis.Redis) -> None:
    """Re-putting a job so that it waits for its own dependent is refused, nothing written."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "c", depends=["b"])
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"Put\(\): .*dependency cycle"):
        put(lua, "a", depends=["c"])
    assert snapshot(r) == before


def test_fix_depends_on_refuses_a_cycle(lua: Any, r: redis.Redis) -> None:
    """`depends on` may not close a cycle either."""
    put(lua, "x")
    put(lua, "a", depends=["x"])
    put(lua, "b", depends=["a"])
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"Depends\(\): .*dependency cycle"):
        lua("depends", 1, "a", "on", "b")
    assert snapshot(r) == before


def test_fix_complete_next_refuses_a_cycle(lua: Any, r: redis.Redis) -> None:
    """Advancing a job to wait for one of its own dependents is refused."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    lua("pop", 1, "queue", "worker", 1)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match=r"Complete\(\): .*dependency cycle"):
        lua("complete", 2, "a", "worker", "queue", "{}", "next", "q2", "depends", ["b"])
    assert snapshot(r) == before


def test_independent_dependencies_are_not_cycles(lua: Any) -> None:
    """A diamond (b and c on a, d on both) is fine, and so is re-putting with a new edge."""
    put(lua, "a")
    put(lua, "b", depends=["a"])
    put(lua, "c", depends=["a"])
    put(lua, "d", depends=["b", "c"])
    put(lua, "e")
    put(lua, "b", depends=["a", "e"])
    assert state(lua, "b") == "depends" and state(lua, "d") == "depends"


# -- depends-missing (extension; bad-input case 32) -------------------------------------------


def test_depends_missing_error_refuses_and_writes_nothing(lua: Any, r: redis.Redis) -> None:
    """With depends-missing error, a dependency on a jid that does not exist refuses the put."""
    lua("put", 0, "worker", "queue", "a", "klass", {}, 0)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="no such dependency: nope"):
        lua("put", 1, "worker", "queue", "b", "klass", {}, 0, "depends", ["a", "nope"],
            "depends-missing", "error")
    assert snapshot(r) == before
    lua("put", 1, "worker", "queue", "b", "klass", {}, 0, "depends", ["a"],
        "depends-missing", "error")
    assert r.hget("ql:j:b", "state") == "depends"


def test_depends_missing_ignore_is_qless_behaviour(lua: Any, r: redis.Redis) -> None:
    lua("put", 0, "worker", "queue", "b", "klass", {}, 0, "depends", ["nope"],
        "depends-missing", "ignore")
    assert r.hget("ql:j:b", "state") == "waiting"


def test_depends_missing_bad_value(lua: Any) -> None:
    with pytest.raises(redis.ResponseError, match='Arg "depends-missing"'):
        lua("put", 0, "worker", "queue", "b", "klass", {}, 0, "depends", ["x"],
            "depends-missing", "maybe")


def test_client_refuses_missing_dependency_by_default(redis_url: str) -> None:
    from django_qless.core import Client, DependencyError

    with Client(redis_url) as client:
        q = client.queues["q"]
        with pytest.raises(DependencyError, match="nope"):
            q.put("K", {}, depends=["nope"])
        assert client.redis.dbsize() == 0
        assert client.jobs[q.put("K", {}, depends=["nope"], depends_missing="ignore")].state \
            == "waiting"
        first = q.put_many([{"klass": "K", "data": {}, "jid": "p"},
                            {"klass": "K", "data": {}, "depends": ["p"]}])
        assert client.jobs[first[1]].state == "depends"
        with pytest.raises(DependencyError):
            q.put_many([{"klass": "K", "data": {}, "depends": ["later"]},
                        {"klass": "K", "data": {}, "jid": "later"}])
