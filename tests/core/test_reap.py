"""The `reap` extension: expired leases recovered on queues nobody pops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument
from tests.core.conftest import snapshot

__all__: list[str] = []

Events = Callable[[], list[tuple[str, str]]]


def running(lua: Any, jid: str = "jid", queue: str = "queue", retries: int = 5,
            **extra: Any) -> None:
    """Put and pop one job for `worker` at time 0 (heartbeat 60, grace 10 by default)."""
    options = [item for pair in extra.items() for item in pair]
    lua("put", 0, "worker", queue, jid, "klass", {}, 0, "retries", retries, *options)
    assert lua.json("pop", 0, queue, "worker", 1)[0]["jid"] == jid


def test_nothing_expired_writes_nothing(lua: Any, r: redis.Redis) -> None:
    """A lease still valid is left alone: empty list, not one key changed."""
    running(lua)
    before = snapshot(r)
    assert lua.json("reap", 59) == []
    assert lua.json("reap", 59, "queue") == []
    assert snapshot(r) == before


def test_courtesy_then_back_to_waiting(lua: Any, r: redis.Redis, events: Events) -> None:
    """First the owner is told (lock_lost, grace); after grace the job waits, a retry spent."""
    running(lua)
    events()
    assert lua.json("reap", 61) == []
    job = lua.json("get", 61, "jid")
    assert job["state"] == "running"
    assert r.zscore("ql:q:queue-locks", "jid") == 71
    assert lua.json("reap", 70) == []
    assert lua.json("reap", 72) == ["jid"]
    job = lua.json("get", 72, "jid")
    assert (job["state"], job["worker"], job["remaining"]) == ("waiting", "", 4)
    assert r.zcard("ql:q:queue-locks") == 0
    assert r.zscore("ql:q:queue-work", "jid") is not None
    assert r.zcard("ql:w:worker:jobs") == 0
    assert ("ql:wake:queue", "queue") in events()
    assert lua.json("pop", 73, "queue", "w2", 1)[0]["jid"] == "jid"


def test_lock_lost_sent_to_owner(lua: Any, events: Events) -> None:
    """The courtesy step publishes lock_lost on the owner's channel, as a pop would."""
    running(lua)
    events()
    lua("reap", 61)
    channels = [channel for channel, _ in events()]
    assert "ql:w:worker" in channels


def test_exhausted_retries_fail(lua: Any) -> None:
    """No retries left: the job fails with failed-retries-<queue>."""
    running(lua, retries=0)
    lua("reap", 61)
    assert lua.json("reap", 72) == ["jid"]
    job = lua.json("get", 72, "jid")
    assert job["state"] == "failed"
    assert job["failure"]["group"] == "failed-retries-queue"


def test_all_known_queues_by_default(lua: Any) -> None:
    """Without queue names every queue in ql:queues is reaped; named queues only those."""
    running(lua, "a", "qa")
    running(lua, "b", "qb")
    lua("reap", 61)
    assert lua.json("reap", 72, "qa") == ["a"]
    assert lua.json("reap", 72) == ["b"]


def test_throttle_slot_freed(lua: Any) -> None:
    """A dead job's throttle slot is released, so a pending job elsewhere is admitted."""
    lua("throttle.set", 0, "t", 1)
    running(lua, "a", "qa", throttles=["t"])
    lua("put", 0, "worker", "qb", "b", "klass", {}, 0, "throttles", ["t"])
    assert lua.json("pop", 1, "qb", "w2", 1) == {}
    lua("reap", 61, "qa")
    assert lua.json("reap", 72, "qa") == ["a"]
    assert [job["jid"] for job in lua.json("pop", 73, "qb", "w2", 1)] == ["b"]


def test_grace_zero_requeues_at_once(lua: Any) -> None:
    """With grace-period 0 the first reap after expiry re-queues."""
    lua("config.set", 0, "grace-period", 0)
    running(lua)
    assert lua.json("reap", 61) == ["jid"]


def test_bad_queue_refused(lua: Any, r: redis.Redis) -> None:
    """An invalid queue name is refused before any write."""
    running(lua)
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="queue"):
        lua("reap", 100, "queue", "bad name")
    assert snapshot(r) == before


def test_client_reap(client: Client, clock: Any) -> None:
    """Client.reap validates names and returns the handled jids."""
    q = client.queues["q"]
    jid = q.put("klass", {}, retries=2)
    assert [job.jid for job in q.pop(1)] == [jid]
    clock.advance(61)
    assert client.reap() == []
    clock.advance(11)
    assert client.reap("q") == [jid]
    assert client.jobs[jid].state == "waiting"
    with pytest.raises(InvalidArgument):
        client.reap(["no good"])


def backlog_and_one_expired(lua: Any) -> None:
    """Jobs w1..w3 waiting (one at a higher priority) behind `jid`, whose lease ran out at 60."""
    running(lua)
    lua("put", 1, "worker", "queue", "w1", "klass", {}, 0)
    lua("put", 2, "worker", "queue", "w2", "klass", {}, 0, "priority", 5)
    lua("put", 3, "worker", "queue", "w3", "klass", {}, 0)


def test_reaped_job_goes_first(lua: Any) -> None:
    """A job the reaper puts back is popped before the waiting backlog, whatever its priority."""
    backlog_and_one_expired(lua)
    lua("reap", 61)
    assert lua.json("reap", 72) == ["jid"]
    order = [job["jid"] for job in lua.json("pop", 73, "queue", "w2", 4)]
    assert order == ["jid", "w2", "w1", "w3"]


def test_pop_time_recovery_goes_first(lua: Any) -> None:
    """Recovery by a pop hands the expired job out first too: the same rule as the reaper."""
    backlog_and_one_expired(lua)
    assert lua.json("reap", 61) == []  # the courtesy notice: the lease is still the owner's
    order = [job["jid"] for job in lua.json("pop", 72, "queue", "w2", 4)]
    assert order == ["jid", "w2", "w1", "w3"]


def test_several_reaped_jobs_keep_expiry_order(lua: Any, r: redis.Redis) -> None:
    """Jobs recovered together go first in the order their leases ran out, ahead of puts."""
    lua("config.set", 0, "grace-period", 0)
    for n, jid in enumerate(["a", "b", "c"]):
        lua("put", n, "worker", "queue", jid, "klass", {}, 0)
        assert lua.json("pop", n, "queue", "worker", 1)[0]["jid"] == jid
    lua("put", 5, "worker", "queue", "late", "klass", {}, 0, "priority", 100)
    assert lua.json("reap", 70) == ["a", "b", "c"]
    assert lua("jobs", 70, "waiting", "queue") == ["a", "b", "c", "late"]
    assert [job["jid"] for job in lua.json("pop", 71, "queue", "w2", 4)] == ["a", "b", "c", "late"]


def test_lease_beyond_the_current_heartbeat_is_cut(lua: Any, r: redis.Redis) -> None:
    """A lease granted under a longer heartbeat ends at most now + the current one."""
    r.hset("ql:config", "heartbeat", "99999999999")  # written before the bounds existed
    running(lua)
    assert lua.json("get", 0, "jid")["expires"] > 1e10
    lua("config.unset", 0, "heartbeat")
    assert lua.json("reap", 100) == []
    assert r.zscore("ql:q:queue-locks", "jid") == 160
    assert r.zscore("ql:w:worker:jobs", "jid") == 160
    assert lua.json("get", 100, "jid")["expires"] == 160
    assert lua.json("reap", 161) == []  # the courtesy notice, as for any expired lease
    assert lua.json("reap", 172) == ["jid"]
    assert lua.json("get", 172, "jid")["state"] == "waiting"


def test_heartbeat_renews_to_the_current_heartbeat(lua: Any, r: redis.Redis) -> None:
    """A heartbeat after the option was lowered grants only the new, shorter lease."""
    lua("config.set", 0, "heartbeat", 600)
    running(lua)
    lua("config.set", 0, "heartbeat", 30)
    assert lua("heartbeat", 10, "jid", "worker") == 40
    assert lua.json("reap", 10) == []
    assert r.zscore("ql:q:queue-locks", "jid") == 40


def test_lease_within_the_heartbeat_is_not_touched(lua: Any, r: redis.Redis) -> None:
    """A lease inside the current bound is left as it is (nothing written)."""
    lua("config.set", 0, "heartbeat", 600)
    running(lua)
    lua.json("reap", 5)  # (writes out the pop's held statistics sample)
    before = snapshot(r)
    assert lua.json("reap", 10) == []
    assert snapshot(r) == before
