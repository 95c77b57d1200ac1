"""Queue methods against the real engine."""

from __future__ import annotations

import time

import pytest
import redis

from django_qless.core import Client, Job, JobNotFound, Queue, RecurringJob
from tests.core.conftest import FakeClock


class Payload:
    """A class whose dotted name becomes the klass."""


def test_put_stores_every_option(client: Client, q: Queue) -> None:
    jid = q.put(Payload, {"a": [1, {}]}, jid="j1", priority=5, tags=["x", "y"], retries=2,
                throttles=["t1"])
    assert jid == "j1"
    job = client.jobs["j1"]
    assert job.klass_name == f"{__name__}.Payload"
    assert job.queue_name == "q"
    assert job.raw_data == '{"a":[1,{}]}'
    assert job.data == {"a": [1, {}]}
    assert job.priority == 5
    assert job.tags == ("x", "y")
    assert (job.retries, job.original_retries) == (2, 2)
    assert job.state == "waiting"
    assert job.throttles == ("t1",)
    assert job.queue == q
    generated = q.put("K", {})
    assert len(generated) == 32


def test_put_delay_and_depends(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="later", delay=30)
    assert client.jobs["later"].state == "scheduled"
    assert q.jobs.scheduled() == ["later"]
    q.put("K", {}, jid="first")
    q.put("K", {}, jid="second", depends=["first"])
    assert client.jobs["second"].state == "depends"
    assert client.jobs["second"].dependencies == ["first"]
    assert client.jobs["first"].dependents == ["second"]
    assert q.jobs.depends() == ["second"]
    clock.advance(31)
    assert q.jobs.scheduled() == []
    assert set(q.jobs.waiting()) == {"later", "first"}


def test_put_many_keeps_order_in_one_round_trip(client: Client, q: Queue, r: redis.Redis) -> None:
    jids = q.put_many([{"klass": "K", "data": {"i": i}, "tags": ["batch"]} for i in range(20)])
    assert len(set(jids)) == 20
    assert q.jobs.waiting(count=50) == jids
    popped = q.pop(20)
    assert [job.jid for job in popped] == jids
    assert [job.data["i"] for job in popped] == list(range(20))
    assert q.put_many([]) == []


def test_requeue_needs_an_existing_job(client: Client, q: Queue) -> None:
    with pytest.raises(JobNotFound):
        q.requeue("K", {}, jid="missing")
    q.put("K", {"v": 1}, jid="j")
    assert client.queues["other"].requeue("K2", {"v": 2}, jid="j", priority=3) == "j"
    job = client.jobs["j"]
    assert (job.queue_name, job.klass_name, job.data, job.priority) == ("other", "K2", {"v": 2}, 3)


def test_pop_and_peek(client: Client, q: Queue, clock: FakeClock) -> None:
    assert q.pop() is None
    assert q.peek() is None
    assert q.pop(3) == []
    for i in range(4):
        clock.advance(1)
        q.put("K", {"i": i}, jid=f"j{i}", priority=i % 2)
    peeked = q.peek(10)
    assert [j.jid for j in peeked] == ["j1", "j3", "j0", "j2"]
    assert [j.jid for j in q.peek(2, offset=1)] == ["j3", "j0"]
    first = q.peek()
    assert isinstance(first, Job) and first.jid == "j1"
    job = q.pop()
    assert job is not None and job.jid == "j1"
    assert job.state == "running"
    assert job.worker_name == "w1"
    rest = q.pop(5)
    assert [j.jid for j in rest] == ["j3", "j0", "j2"]


def test_recur_spawns_children(client: Client, q: Queue, clock: FakeClock) -> None:
    jid = q.recur("K", {"r": 1}, 60, jid="rec", priority=2, tags=["t"], retries=3, backlog=0)
    assert jid == "rec"
    rec = client.jobs.recurring("rec")
    assert isinstance(rec, RecurringJob)
    assert (rec.klass_name, rec.queue_name, rec.data, rec.priority) == ("K", "q", {"r": 1}, 2)
    assert (rec.interval, rec.retries, rec.tags, rec.count) == (60, 3, ("t",), 0)
    assert rec.next_run == clock.t
    assert q.jobs.recurring() == ["rec"]
    clock.advance(125)
    children = q.pop(10)
    assert sorted(j.jid for j in children) == ["rec-1", "rec-2", "rec-3"]
    assert all(j.spawned_from == "rec" for j in children)
    assert rec.next_run == 1_000_000.0 + 180


def test_pause_unpause(q: Queue) -> None:
    q.put("K", {})
    assert q.paused is False
    q.pause()
    assert q.paused is True
    assert q.counts["paused"] is True
    assert q.pop() is None
    q.unpause()
    assert q.paused is False
    assert q.pop() is not None


def test_counts_length_stats(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b", delay=100)
    q.put("K", {}, jid="c")
    counts = q.counts
    assert counts["name"] == "q"
    assert (counts["waiting"], counts["scheduled"], counts["running"]) == (2, 1, 0)
    assert q.length == 3
    assert len(q) == 3
    clock.advance(2)
    job = q.pop()
    assert job is not None
    clock.advance(3)
    job.complete()
    stats = q.stats()
    assert stats["wait"]["count"] == 1
    assert stats["run"]["count"] == 1
    assert stats["run"]["histogram"][3] == 1
    assert q.stats(clock.t - 86400 * 3)["wait"]["count"] == 0
    assert client.queues.counts[0]["name"] == "q"
    assert client.queues.names() == ["q"]


def test_heartbeat_and_max_concurrency(client: Client, q: Queue, clock: FakeClock) -> None:
    assert q.heartbeat == 60
    client.config["heartbeat"] = 90
    assert q.heartbeat == 90
    q.heartbeat = 30
    assert q.heartbeat == 30
    assert client.config["q-heartbeat"] == 30
    q.put("K", {})
    job = q.pop()
    assert job is not None and job.expires_at == clock.t + 30
    assert q.max_concurrency == 0
    q.max_concurrency = 1
    assert q.max_concurrency == 1
    q.put("K", {})
    assert q.pop() is None
    job.complete()
    assert q.pop() is not None


def test_queue_throttle(client: Client, q: Queue, clock: FakeClock) -> None:
    q.throttle.set(1)
    assert q.throttle.id == "ql:q:q"
    assert q.throttle.maximum == 1
    q.put("K", {}, jid="a")
    clock.advance(1)
    q.put("K", {}, jid="b")
    first = q.pop()
    assert first is not None and first.jid == "a"
    assert q.pop() is None
    assert q.jobs.throttled() == ["b"]
    assert q.throttle.locks() == ["a"]
    first.complete()
    second = q.pop()
    assert second is not None and second.jid == "b"


def test_unfail_and_forget(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    job = q.pop()
    assert job is not None
    job.fail("boom", "it broke")
    assert client.jobs.failed() == {"boom": 1}
    assert q.unfail("boom") == 1
    assert client.jobs["a"].state == "waiting"
    assert client.jobs.failed() == {}
    q.forget()
    assert "q" not in client.queues.names()
    q.put("K", {})
    assert "q" in client.queues.names()


def test_job_listings_by_state(client: Client, q: Queue, clock: FakeClock) -> None:
    q.put("K", {}, jid="run")
    running = q.pop()
    assert running is not None
    q.put("K", {}, jid="wait")
    assert q.jobs.running() == ["run"]
    assert q.jobs.waiting() == ["wait"]
    assert q.jobs.stalled() == []
    clock.advance(61)
    assert q.jobs.stalled() == ["run"]
    assert q.jobs.running() == []
    assert q.jobs.throttled() == []
    assert q.jobs.recurring() == []
    assert q.jobs.waiting(offset=1) == []


def test_recurring_job_methods(client: Client, q: Queue, clock: FakeClock) -> None:
    q.recur("K", {"v": 1}, 60, jid="rec", offset=10)
    rec = client.jobs.recurring("rec")
    assert rec is not None
    assert rec.next_run == clock.t + 10
    rec.update(priority=4, interval=120, retries=1, data={"v": 2}, klass="K2", backlog=2)
    assert (rec.priority, rec.interval, rec.retries, rec.data, rec.klass_name, rec.backlog) == (
        4, 120, 1, {"v": 2}, "K2", 2)
    assert rec.next_run == clock.t + 10 + 60
    rec.update(queue="other")
    assert rec.queue_name == "other"
    assert client.queues["other"].jobs.recurring() == ["rec"]
    assert rec.tag("a", "b") == ("a", "b")
    assert rec.untag("a") == ("b",)
    assert rec.refresh().tags == ("b",)
    rec.cancel()
    assert client.jobs.recurring("rec") is None
    with pytest.raises(JobNotFound):
        rec.refresh()


def test_pipeline_calls_can_return_errors(client: Client, q: Queue) -> None:
    q.put("K", {}, jid="a")
    results = client.pipeline_calls(
        [("priority", ["a", 3]), ("priority", ["missing", 1]), ("length", ["q"])],
        raise_on_error=False,
    )
    assert results[0] == 3
    assert isinstance(results[1], JobNotFound)
    assert results[2] == 1
    with pytest.raises(JobNotFound):
        client.pipeline_calls([("priority", ["missing", 1])])
    assert client.pipeline_calls([]) == []


def test_client_context_manager_closes_its_pool(redis_url: str, r: redis.Redis) -> None:
    # (the session's server may still hold connections of earlier tests' processes while
    # they exit: only the connections opened inside the block count)
    before = {c["id"] for c in r.client_list()}
    with Client(redis_url, worker_name="ctx") as client:
        client.queues["q"].put("K", {})
        opened = {c["id"] for c in r.client_list()} - before
        assert len(opened) == 1
    deadline = time.monotonic() + 5
    while opened & {c["id"] for c in r.client_list()} and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not opened & {c["id"] for c in r.client_list()}
