"""Job properties and mutators against the real engine."""

from __future__ import annotations

import pytest
import redis

from django_qless.core import (
    Client,
    DependencyError,
    InvalidStateTransition,
    Job,
    JobNotFound,
    LostLockError,
    Queue,
)
from tests.core.conftest import FakeClock
from tests.core.keyspace_mode import to_shard


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(2_000_000.0)


def pop(q: Queue) -> Job:
    job = q.pop()
    assert job is not None
    return job


def test_properties_are_read_only(client: Client, q: Queue) -> None:
    q.put("K", {"a": 1}, jid="j")
    job = client.jobs["j"]
    for name in ("data", "priority", "tags", "state", "queue_name", "retries", "expires_at"):
        with pytest.raises(AttributeError):
            setattr(job, name, None)
    with pytest.raises(AttributeError):
        job.extra = 1  # type: ignore[attr-defined]
    assert "j" in repr(job)


def test_complete_sends_the_raw_data_unless_changed(client: Client, q: Queue,
                                                    r: redis.Redis) -> None:
    raw = '{"b": 1,  "a": [] , "n": 12345678901234567890}'
    client.call("put", "w1", "q", "j", "K", raw, 0)
    job = pop(q)
    assert job.raw_data == raw
    assert job.complete() == "complete"
    assert job.state == "complete"
    assert r.hget("ql:j:j", "data") == raw
    client.call("put", "w1", "q", "k", "K", raw, 0)
    job = pop(q)
    job.data["b"] = 2
    job.complete()
    assert r.hget("ql:j:k", "data") == '{"b":2,"a":[],"n":12345678901234567890}'


def test_complete_twice_is_refused(client: Client, q: Queue) -> None:
    """Another attempt is refused; the same attempt again gets the recorded result."""
    q.put("K", {}, jid="j")
    job = pop(q)
    job.complete()
    with pytest.raises(LostLockError, match="not currently running: complete"):
        client.call("complete", "j", "w1", "q", "{}", "token", "another")
    assert job.complete() == "complete"
    assert [e["what"] for e in client.jobs["j"].history].count("done") == 1


def test_fail_and_retry_repeated_with_the_same_token(client: Client, q: Queue) -> None:
    """fail and retry repeated by the same attempt return what the first call did, once."""
    q.put("K", {}, jid="f")
    failing = pop(q)
    assert failing.fail("g", "m") == "f"
    assert failing.fail("g", "m") == "f"
    assert client.redis.llen(to_shard("ql:f:g")) == 1
    q.put("K", {}, jid="r", retries=3)
    retrying = pop(q)
    assert retrying.retry() == 2
    assert retrying.retry() == 2
    assert client.jobs["r"].retries == 2
    with pytest.raises(LostLockError):
        client.call("retry", "r", "q", "w1", 0, "", "", "another")


def test_complete_advances_with_delay_and_depends(client: Client, q: Queue,
                                                  clock: FakeClock) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="dep")
    q.put("K", {}, jid="b")
    job = pop(q)
    assert job.complete("next", delay=10) == "scheduled"
    assert client.jobs[job.jid].queue_name == "next"
    assert client.queues["next"].jobs.scheduled() == [job.jid]
    other = pop(q)
    assert other.complete("next", depends=[j for j in ("a", "dep", "b") if j != other.jid]) in (
        "depends", "waiting")


def test_fail_retry_heartbeat(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {"x": 1}, jid="j", retries=1)
    job = pop(q)
    clock.advance(5)
    assert job.heartbeat() == int(clock.t + 60)
    assert job.expires_at == int(clock.t + 60)
    assert job.ttl == pytest.approx(60, abs=1)
    assert job.retry(delay=0, group="g", message="m") == 0
    assert client.jobs["j"].state == "waiting"
    job = pop(q)
    assert job.retry() == -1
    failed = client.jobs["j"]
    assert failed.state == "failed"
    assert failed.failure is not None and failed.failure["group"] == "failed-retries-q"
    q.put("K", {"x": 1}, jid="f")
    job = pop(q)
    job.data["x"] = 2
    assert job.fail("grp", "went wrong") == "f"
    failed = client.jobs["f"]
    assert failed.state == "failed"
    assert failed.failure is not None
    assert (failed.failure["group"], failed.failure["message"]) == ("grp", "went wrong")
    assert failed.data == {"x": 2}
    with pytest.raises(LostLockError):
        job.heartbeat()


def test_heartbeat_by_another_worker_is_refused(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="j")
    pop(q)
    other = Client(client.redis, worker_name="w2", _clock=client._clock)
    with pytest.raises(LostLockError, match="another worker"):
        other.jobs["j"].heartbeat()


def test_cancel_move_requeue(client: Client, q: Queue) -> None:
    q.put("K", {"d": 1}, jid="j", priority=4, tags=["t"], retries=2)
    job = client.jobs["j"]
    assert job.move("elsewhere") == "j"
    moved = client.jobs["j"]
    assert (moved.queue_name, moved.data, moved.priority, moved.tags, moved.original_retries) == (
        "elsewhere", {"d": 1}, 4, ("t",), 2)
    assert moved.requeue(priority=1) == "j"
    assert client.jobs["j"].priority == 1
    assert client.jobs["j"].queue_name == "elsewhere"
    assert moved.cancel() == ["j"]
    assert client.jobs.get("j") is None
    with pytest.raises(JobNotFound):
        moved.requeue()
    with pytest.raises(JobNotFound):
        moved.refresh()


def test_priority_tags_tracking(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="j")
    job = client.jobs["j"]
    assert job.set_priority(9) == 9
    assert job.priority == 9
    assert job.tag("a", "b") == ("a", "b")
    assert job.untag("a") == ("b",)
    assert job.untag("b") == ()
    assert job.tracked is False
    job.track()
    assert job.tracked is True
    assert client.jobs["j"].tracked is True
    job.untrack()
    assert client.jobs["j"].tracked is False


def test_depend_undepend(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b")
    q.put("K", {}, jid="c", depends=["a"])
    job = client.jobs["c"]
    assert job.depend("b") is True
    assert sorted(job.dependencies) == ["a", "b"]
    assert job.undepend("a") is True
    assert job.dependencies == ["b"]
    assert job.undepend(all=True) is True
    assert client.jobs["c"].state == "waiting"
    with pytest.raises(DependencyError):
        client.jobs["c"].depend("a")


def test_timeout_log_refresh(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="j")
    job = pop(q)
    job.log("checkpoint", {"step": 3})
    entry = job.history[-1]
    assert (entry["what"], entry["step"]) == ("checkpoint", 3)
    job.timeout()
    assert job.state == "stalled"
    assert client.jobs["j"].state == "stalled"
    with pytest.raises(InvalidStateTransition):
        client.jobs["j"].timeout()
    stale = client.jobs["j"]
    stale_state = stale.state
    pop(q)
    assert stale.state == stale_state
    assert stale.refresh().state == "running"


def test_lean_jobs_load_history_lazily(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b", depends=["a"])
    jobs, _ = client.reserve(["q"])
    job = jobs[0]
    assert job.jid == "a"
    assert [e["what"] for e in job.history] == ["put", "popped"]
    assert job.dependents == ["b"]
    assert job.dependencies == []


def test_from_dict_normalises_engine_quirks(client: Client) -> None:
    job = Job.from_dict(client, {
        "jid": "x", "klass": "K", "state": "waiting", "queue": "q", "worker": "",
        "tracked": False, "priority": 0, "expires": 0, "retries": 5, "remaining": 5,
        "data": "{}", "tags": {}, "history": {}, "failure": {}, "spawned_from_jid": False,
        "dependents": {}, "dependencies": {},
    })
    assert job.tags == ()
    assert job.history == []
    assert job.failure is None
    assert job.spawned_from is None
    assert job.dependents == [] and job.dependencies == []
    assert job.data == {}


def test_moving_a_running_job_takes_it_from_its_worker(client: Client, q: Queue) -> None:
    q.put("K", {"keep": True}, jid="j")
    job = pop(q)
    other = Client(client.redis, worker_name="w2", _clock=client._clock)
    assert other.jobs["j"].move("q2") == "j"
    with pytest.raises(LostLockError):
        job.complete()
    moved = client.jobs["j"]
    assert (moved.queue_name, moved.state, moved.data) == ("q2", "waiting", {"keep": True})
