"""client.jobs / workers / config / throttles / tags / track against the real engine."""

from __future__ import annotations

import pytest

from django_qless.core import Client, Job, JobNotFound, LostLockError, Queue
from tests.core.conftest import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(3_000_000.0)


def test_job_lookups(client: Client, q: Queue, clock: FakeClock) -> None:
    with pytest.raises(JobNotFound):
        client.jobs["nope"]
    assert client.jobs.get("nope") is None
    for name in ("a", "b", "c"):
        clock.advance(1)
        q.put("K", {}, jid=name, tags=["shared"])
    assert isinstance(client.jobs["a"], Job)
    assert sorted(j.jid for j in client.jobs.get_many("a", "c", "missing")) == ["a", "c"]
    assert client.jobs.get_many() == []
    tagged = client.jobs.tagged("shared")
    assert tagged == {"total": 3, "jobs": ["a", "b", "c"]}
    assert client.jobs.tagged("shared", offset=1, count=1) == {"total": 3, "jobs": ["b"]}
    assert client.jobs.tagged("none") == {"total": 0, "jobs": []}


def test_tracked_failed_complete(client: Client, q: Queue, clock: FakeClock) -> None:
    assert client.jobs.tracked() == {"jobs": [], "expired": []}
    q.put("K", {}, jid="t")
    assert client.track("t") is True
    tracked = client.jobs.tracked()
    assert [j.jid for j in tracked["jobs"]] == ["t"]
    assert client.untrack("t") is True
    assert client.jobs.tracked()["jobs"] == []

    assert client.jobs.failed() == {}
    fq = client.queues["fq"]
    for name in ("f1", "f2"):
        clock.advance(1)
        fq.put("K", {}, jid=name)
        job = fq.pop()
        assert job is not None and job.jid == name
        assert job is not None
        job.fail("grp", "bad")
    assert client.jobs.failed() == {"grp": 2}
    page = client.jobs.failed("grp", start=0, limit=1)
    assert page["total"] == 2
    assert [j.jid for j in page["jobs"]] == ["f2"]
    assert client.jobs.failed("empty") == {"total": 0, "jobs": []}

    assert client.jobs.complete() == []
    fq.put("K", {}, jid="done")
    job = fq.pop()
    assert job is not None
    job.complete()
    assert client.jobs.complete() == ["done"]
    assert client.jobs.recurring("done") is None


def test_workers(client: Client, q: Queue) -> None:
    assert client.workers.counts == []
    q.put("K", {}, jid="a")
    assert q.pop() is not None
    assert client.workers.counts == [{"name": "w1", "jobs": 1, "stalled": 0}]
    assert client.workers["w1"] == {"jobs": ["a"], "stalled": []}
    assert client.workers["ghost"] == {"jobs": [], "stalled": []}
    client.workers.deregister("w1")
    assert client.workers.counts == []


def test_what_a_worker_holds(client: Client, q: Queue) -> None:
    """release, hold_jobs and still_hold answer for one attempt, by its token."""
    q.put("K", {}, jid="a")
    q.put("K", {}, jid="b")
    first, second = q.pop(2)
    assert client.workers.hold_jobs(["ghost", "w1"]) is True
    assert client.workers.hold_jobs(["ghost"]) is False
    assert client.workers.hold_jobs([]) is False
    attempt = (first.jid, "w1", first.attempt_token)
    assert client.workers.still_hold([attempt, (second.jid, "ghost", "")]) == [True, False]
    first.complete()  # settled by this attempt: still its own
    assert client.workers.still_hold([attempt]) == [True]
    assert client.workers.still_hold([(first.jid, "w1", "another")]) == [False]
    client.workers.release(second.jid, "w1")
    assert client.jobs[second.jid].state == "waiting"
    assert client.workers.hold_jobs(["w1"]) is False
    with pytest.raises(LostLockError):
        client.workers.release(second.jid, "w1")
    assert client.workers.still_hold([]) == []
    assert client.serving("any") == [client]


def test_config_mapping(client: Client) -> None:
    assert client.config["heartbeat"] == 60
    assert client.config["application"] == "qless"
    with pytest.raises(KeyError):
        client.config["nonexistent"]
    assert client.config.get("nonexistent", "dflt") == "dflt"
    client.config["heartbeat"] = 30
    client.config["custom"] = "hello"
    assert client.config["heartbeat"] == 30
    everything = client.config.all
    assert everything["heartbeat"] == 30
    assert everything["custom"] == "hello"
    assert everything["grace-period"] == 10
    assert "custom" in list(client.config)
    assert len(client.config) == len(everything)
    del client.config["heartbeat"]
    assert client.config["heartbeat"] == 60


def test_throttles(client: Client, q: Queue, clock: FakeClock) -> None:
    throttle = client.throttles["api"]
    assert throttle.info() == {"id": "api", "maximum": 0, "ttl": -2}
    throttle.set(1, ttl=100)
    assert throttle.maximum == 1
    assert 0 < throttle.ttl <= 100
    q.put("K", {}, jid="a", throttles=["api"])
    clock.advance(1)
    q.put("K", {}, jid="b", throttles=["api"])
    assert [j.jid for j in q.pop(2)] == ["a"]
    assert throttle.locks() == ["a"]
    assert throttle.pending() == ["b"]
    throttle.release("a", "b")
    assert throttle.locks() == []
    assert throttle.pending() == []
    throttle.delete()
    assert throttle.maximum == 0


def test_tags_top(client: Client, q: Queue) -> None:
    assert client.tags.top() == []
    q.put("K", {}, tags=["popular", "rare"])
    q.put("K", {}, tags=["popular"])
    assert client.tags.top() == ["popular"]
