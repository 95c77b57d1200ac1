"""The invariant auditor: clean engine-built states pass; each hand-made corruption is found
(named invariant, subject) and `fix=True` repairs it so a second audit is clean."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import pytest
import redis

from django_qless.core.audit import AuditReport, audit
from django_qless.core.client import Client
from django_qless.core.health import check_eviction, clock_skew, eviction_policy


@pytest.fixture
def client(redis_url: str) -> Iterator[Client]:
    c = Client(redis_url, worker_name="w1")
    yield c
    c.close()


def found(report: AuditReport) -> set[tuple[str, str]]:
    """Return {(invariant, subject)} of a report."""
    return {(v.invariant, v.subject) for v in report.violations}


def assert_clean(conn: Client | redis.Redis) -> None:
    report = audit(conn)
    assert report.ok, str(report)


def build_everything(c: Client, lua: Callable[..., object]) -> dict[str, str]:
    """Put jobs into every state the engine has, through the engine only."""
    q = c.queues["q"]
    out = {}
    out["waiting"] = q.put("t.Job", {"a": []}, tags=["red", "blue"], priority=3)
    out["scheduled"] = q.put("t.Job", {}, delay=3600, tags=["red"])
    out["dep_on"] = q.put("t.Job", {}, priority=10)
    out["depends"] = q.put("t.Job", {}, depends=[out["dep_on"]], delay=5)
    c.track(out["depends"])
    running = q.pop()
    assert running is not None and running.jid == out["dep_on"]
    out["running"] = running.jid
    fails = c.queues["f"]
    out["failed"] = fails.put("t.Job", {}, tags=["red"])
    fails.pop().fail("some.Group", "it broke")
    out["complete"] = fails.put("t.Job", {})
    fails.pop().complete()
    out["advanced"] = fails.put("t.Job", {})
    fails.pop().complete(next="q2", delay=30)
    out["stalled"] = fails.put("t.Job", {})
    fails.pop().timeout()
    c.throttles["th"].set(1)
    t = c.queues["t"]
    out["holder"] = t.put("t.Job", {}, throttles=["th"])
    out["throttled"] = t.put("t.Job", {}, throttles=["th"])
    got = t.pop(2)
    assert [j.jid for j in got] == [out["holder"]]
    out["recur"] = c.queues["r"].recur("t.Job", {}, 60, tags=["red"])
    c.queues["r"].pop()  # spawns and pops the first child
    c.queues["p"].put("t.Job", {})
    c.queues["p"].pause()
    return out


def test_engine_built_states_are_clean(client: Client, lua) -> None:
    jobs = build_everything(client, lua)
    report = audit(client)
    assert report.ok, str(report)
    assert report.jobs >= len(jobs)
    # retries exhausted by lock loss, and dependents released by completion stay clean
    client.jobs[jobs["running"]].complete()
    assert client.jobs[jobs["depends"]].state == "scheduled"
    assert_clean(client)


def test_grace_period_and_lock_loss_paths_are_clean(r, lua) -> None:
    lua("config.set", 0, "grace-period", 10)
    lua("put", 0, "w", "q", "j1", "K", "{}", 0, "retries", 1, "tags", '["x"]')
    lua("throttle.set", 0, "th", 1)
    lua("put", 0, "w", "q", "j2", "K", "{}", 0, "throttles", '["th"]')
    assert len(lua.json("pop", 1, "q", "A", 2)) == 2
    # lease (60 s) over: courtesy notice, the job stays running for A, out of A's set
    lua("pop", 62, "q", "B", 2)
    assert r.zscore("ql:w:A:jobs", "j1") is None and r.hget("ql:j:j1", "state") == "running"
    assert_clean(r)
    popped = lua.json("pop", 80, "q", "B", 2)  # grace over: both re-dispatched to B
    assert {j["jid"] for j in popped} == {"j1", "j2"}
    assert_clean(r)
    lua("pop", 200, "q", "C", 2)
    lua("pop", 220, "q", "C", 2)  # j1 exhausts retries and fails, releasing nothing it lacks
    assert r.hget("ql:j:j1", "state") == "failed"
    assert_clean(r)


# Each case: corrupt a clean state; the expected (invariant, subject) must be reported,
# then fix=True must leave nothing behind.
def _ghost_in_work(r, jobs):
    r.zadd("ql:q:q-work", {"ghost1": 1})
    return {("index.ghost", "ql:q:q-work ghost1")}


def _orphan_hash(r, jobs):
    r.zrem("ql:q:q-work", jobs["waiting"])
    return {("index.missing", jobs["waiting"])}


def _duplicate_index(r, jobs):
    r.zadd("ql:q:other-work", {jobs["waiting"]: 0})
    r.zadd("ql:q:q-scheduled", {jobs["waiting"]: 5})
    return {("index.mismatch", f"ql:q:other-work {jobs['waiting']}"),
            ("index.extra", jobs["waiting"]),
            ("index.mismatch", f"ql:q:q-scheduled {jobs['waiting']}")}


def _running_not_in_worker_set(r, jobs):
    r.zrem("ql:w:w1:jobs", jobs["running"])
    return {("index.missing", jobs["running"])}


def _running_without_lease(r, jobs):
    r.hset(f"ql:j:{jobs['running']}", mapping={"worker": "", "expires": 0})
    return {("running.lease", jobs["running"]),
            ("index.mismatch", f"ql:w:w1:jobs {jobs['running']}")}


def _stale_worker_entry(r, jobs):
    r.zadd("ql:w:w9:jobs", {jobs["waiting"]: 99})
    return {("index.mismatch", f"ql:w:w9:jobs {jobs['waiting']}")}


def _failed_not_listed(r, jobs):
    r.delete("ql:f:some.Group")
    return {("index.missing", jobs["failed"]), ("failures.set", "ql:f:some.Group")}


def _failed_listed_twice(r, jobs):
    r.lpush("ql:f:some.Group", jobs["failed"])
    return {("failed.duplicate", jobs["failed"])}


def _complete_not_indexed(r, jobs):
    r.zrem("ql:completed", jobs["complete"])
    return {("index.missing", jobs["complete"])}


def _completed_ghost(r, jobs):
    r.zadd("ql:completed", {"gone": 1})
    return {("index.ghost", "ql:completed gone")}


def _stalled_score(r, jobs):
    r.zadd("ql:q:f-work", {jobs["stalled"]: 1})
    return {("stalled.score", jobs["stalled"])}


def _depends_without_deps(r, jobs):
    r.delete(f"ql:j:{jobs['depends']}-dependencies")
    return {("deps.state", jobs["depends"]),
            ("deps.symmetry", f"ql:j:{jobs['dep_on']}-dependents {jobs['depends']}")}


def _asymmetric_edge(r, jobs):
    r.srem(f"ql:j:{jobs['dep_on']}-dependents", jobs["depends"])
    return {("deps.symmetry", f"ql:j:{jobs['depends']}-dependencies {jobs['dep_on']}")}


def _edge_to_ghost(r, jobs):
    r.sadd(f"ql:j:{jobs['depends']}-dependencies", "vanished")
    return {("deps.ghost", f"ql:j:{jobs['depends']}-dependencies vanished")}


def _tag_entry_without_tag(r, jobs):
    r.zadd("ql:t:blue", {jobs["complete"]: 1})
    r.zincrby("ql:tags", 1, "blue")
    return {("tags.index", f"ql:t:blue {jobs['complete']}")}


def _tag_missing_from_index(r, jobs):
    r.zrem("ql:t:blue", jobs["waiting"])
    return {("tags.index", jobs["waiting"]), ("tags.counter", "ql:t:blue")}


def _tag_counter_drift(r, jobs):
    r.zincrby("ql:tags", 5, "red")
    r.zadd("ql:tags", {"nothing": 2})
    return {("tags.counter", "ql:t:red"), ("tags.counter", "ql:t:nothing")}


def _throttle_lock_of_non_running(r, jobs):
    r.zadd("ql:th:th-locks", {jobs["waiting"]: 1})
    return {("throttle.lock", f"ql:th:th-locks {jobs['waiting']}")}


def _throttle_slot_kept_after_stop(r, jobs):
    # the holder "completed" without releasing: the slot and the held field stay behind
    r.hset(f"ql:j:{jobs['holder']}", mapping={"state": "complete", "worker": "", "queue": ""})
    r.zrem("ql:q:t-locks", jobs["holder"])
    r.zrem("ql:w:w1:jobs", jobs["holder"])
    r.zadd("ql:completed", {jobs["holder"]: 1})
    return {("throttle.lock", jobs["holder"]),
            ("throttle.lock", f"ql:th:th-locks {jobs['holder']}")}


def _slot_released_under_a_running_job(r, jobs):
    r.zrem("ql:th:th-locks", jobs["holder"])  # what `throttle.release th <jid>` does
    return {("throttle.lock", jobs["holder"])}


def _throttled_not_pending(r, jobs):
    r.delete("ql:th:th-pending")
    return {("throttle.pending", jobs["throttled"])}


def _remaining_out_of_range(r, jobs):
    r.hset(f"ql:j:{jobs['waiting']}", "remaining", 9)
    return {("retries.range", jobs["waiting"])}


def _unknown_state(r, jobs):
    r.hset(f"ql:j:{jobs['waiting']}", "state", "limbo")
    return {("state.unknown", jobs["waiting"])}


def _tracked_mirror(r, jobs):
    r.zrem("ql:tracked", jobs["depends"])
    return {("tracked.mirror", jobs["depends"])}


def _recur_ghost(r, jobs):
    r.delete(f"ql:r:{jobs['recur']}")
    return {("recur.index", f"ql:q:r-recur {jobs['recur']}")}


def _meta_due_too_late(r, jobs):
    r.hset("ql:config", "#due:q", "inf")  # later than the scheduled job's time
    return {("queue.meta", "ql:config #due:q")}


def _meta_throttle_cache_stale(r, jobs):
    r.hset("ql:config", "#throttle:t", "1")  # queue t has no queue throttle
    return {("queue.meta", "ql:config #throttle:t")}


def _orphan_history(r, jobs):
    r.rpush("ql:j:nobody-history", "[0,\"put\"]")
    return {("orphan.key", "ql:j:nobody-history")}


NOT_FIXABLE = {"_remaining_out_of_range": "retries.range", "_unknown_state": "state.unknown"}
CASES = [f for name, f in sorted(globals().items()) if name.startswith("_") and callable(f)
         and f.__module__ == __name__ and name not in ("__getattr__",)]


@pytest.mark.parametrize("corrupt", CASES, ids=[f.__name__.strip("_") for f in CASES])
def test_each_corruption_is_detected_and_fixed(client: Client, lua, r, corrupt) -> None:
    jobs = build_everything(client, lua)
    assert_clean(client)
    expected = corrupt(r, jobs)
    report = audit(client)
    assert expected <= found(report), str(report)
    for v in report.violations:
        assert v.detail and str(v).startswith(f"[{v.invariant}] {v.subject}")
    fixed = audit(client, fix=True)
    if corrupt.__name__ in NOT_FIXABLE:
        remains = NOT_FIXABLE[corrupt.__name__]
        assert {v.invariant for v in fixed.violations} == {remains}, str(fixed)
        assert all(not v.fixable for v in fixed.violations)
    else:
        assert fixed.ok, str(fixed)
        assert fixed.fixed
        assert_clean(client)


def test_fix_releases_slot_and_admits_the_throttled_job(client: Client, lua, r) -> None:
    jobs = build_everything(client, lua)
    _throttle_slot_kept_after_stop(r, jobs)
    assert client.queues["t"].pop() is None  # the stale slot blocks the throttled job
    report = audit(client, fix=True)
    assert report.ok, str(report)
    assert any("admitted" in f for f in report.fixed)
    job = client.queues["t"].pop()
    assert job is not None and job.jid == jobs["throttled"]


def test_fix_stalls_a_running_job_without_lease_so_it_runs_again(client: Client, lua, r):
    jobs = build_everything(client, lua)
    _running_without_lease(r, jobs)
    assert audit(client, fix=True).ok
    job = client.jobs[jobs["running"]]
    assert job.state == "stalled"
    again = client.queues["q"].pop()
    assert again is not None and again.jid == jobs["running"]


def test_fix_releases_a_dependent_whose_dependency_vanished(client: Client, lua, r):
    jobs = build_everything(client, lua)
    r.delete(f"ql:j:{jobs['dep_on']}", f"ql:j:{jobs['dep_on']}-history")
    r.zrem("ql:q:q-locks", jobs["dep_on"])
    r.zrem("ql:w:w1:jobs", jobs["dep_on"])
    report = audit(client)
    assert ("orphan.key", f"ql:j:{jobs['dep_on']}-dependents") in found(report)
    assert audit(client, fix=True).ok
    assert client.jobs[jobs["depends"]].state == "scheduled"


def test_report_shapes_and_non_decoding_connection(client: Client, lua, redis_server) -> None:
    build_everything(client, lua)
    client.redis.zadd("ql:q:q-work", {"ghost": 1})
    raw = redis.Redis(unix_socket_path=redis_server.socket_path)  # bytes replies
    try:
        report = audit(raw)
    finally:
        raw.close()
    data = json.loads(json.dumps(report.as_dict()))
    assert data["ok"] is False and data["by_invariant"] == {"index.ghost": 1}
    assert data["violations"][0]["subject"] == "ql:q:q-work ghost"
    assert "1 violation\n" in str(report)
    with pytest.raises(TypeError):
        audit("redis://nowhere")


def test_transient_violation_is_not_reported_when_it_heals(client: Client, r, monkeypatch):
    """A job moving between the two passes is re-checked before it is reported."""
    from django_qless.core.audit import auditor as audit_mod

    q = client.queues["q"]
    jid = q.put("t.Job", {})
    real = audit_mod.Auditor.run
    calls = []

    def run(self):
        out = real(self)
        calls.append(len(out))
        if len(calls) == 1:
            r.zadd("ql:q:q-work", {jid: 0})  # heal before the re-check
        return out

    r.zrem("ql:q:q-work", jid)
    monkeypatch.setattr(audit_mod.Auditor, "run", run)
    assert audit(client).ok
    assert calls == [1, 0]


def test_audit_is_bounded_and_uses_scan(client: Client, r) -> None:
    q = client.queues["q"]
    q.put_many([{"klass": "t.Job", "data": {}, "tags": ["bulk"]} for _ in range(1200)])
    before = r.info("commandstats")
    report = audit(client)
    after = r.info("commandstats")
    assert report.ok and report.jobs == 1200
    assert "cmdstat_keys" not in after or after["cmdstat_keys"] == before.get("cmdstat_keys")
    assert after["cmdstat_scan"]["calls"] > before.get("cmdstat_scan", {"calls": 0})["calls"]


def test_health_probes(r) -> None:
    assert eviction_policy(r) == "noeviction"
    assert check_eviction(r) is None
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        assert eviction_policy(r) == "allkeys-lru"
        warning = check_eviction(r)
        assert warning is not None and "allkeys-lru" in warning and "noeviction" in warning
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert abs(clock_skew(r)) < 1.0
    seconds, _ = r.time()
    assert clock_skew(r, clock=lambda: float(seconds) + 300) == pytest.approx(300, abs=2)
    assert clock_skew(r, clock=lambda: float(seconds) - 300) == pytest.approx(-300, abs=2)
