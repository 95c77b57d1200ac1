"""Conformance of the query and admin commands."""

from __future__ import annotations

import math
from typing import Any

import pytest
import redis

__all__: list[str] = []

DAY = 1699920000  # bin(1700000000)


def put(lua: Any, jid: str = "jid", queue: str = "queue", *, now: float = 0, delay: float = 0,
        **opts: Any) -> Any:
    """Put one job; keyword options become trailing name/value pairs."""
    pairs: list[Any] = []
    for name, value in opts.items():
        pairs += [name, value]
    return lua("put", now, "worker", queue, jid, "klass", {}, delay, *pairs)


def running(lua: Any, jid: str = "jid", now: float = 0, worker: str = "worker",
            queue: str = "queue") -> None:
    """Put and pop one job."""
    put(lua, jid, queue, now=now)
    assert lua.json("pop", now, queue, worker, 1)[0]["jid"] == jid


def failed(lua: Any, jid: str, group: str = "grp", now: float = 0) -> None:
    """Make one failed job."""
    running(lua, jid, now)
    lua("fail", now, jid, "worker", group, "msg")


# -- get / multiget -----------------------------------------------------------------------------


def test_get_missing_is_nil(lua: Any) -> None:
    """Reply nil for an unknown jid."""
    assert lua("get", 0, "nope") is None


def test_multiget_skips_missing(lua: Any) -> None:
    """Return the existing jobs in argument order."""
    put(lua, "a")
    put(lua, "b")
    assert [j["jid"] for j in lua.json("multiget", 0, "b", "nope", "a")] == ["b", "a"]


def test_multiget_all_missing(lua: Any) -> None:
    """Reply `{}` when none exist."""
    assert lua("multiget", 0, "x", "y") == "{}"


# -- jobs ---------------------------------------------------------------------------------------


def test_jobs_complete_most_recent_first(lua: Any) -> None:
    """List completed jids newest first with paging."""
    for n in range(4):
        running(lua, f"j{n}", n)
        lua("complete", n, f"j{n}", "worker", "queue", {})
    assert lua("jobs", 10, "complete") == ["j3", "j2", "j1", "j0"]
    assert lua("jobs", 10, "complete", 1, 2) == ["j2", "j1"]


def test_jobs_empty_is_array(lua: Any) -> None:
    """Reply with an empty RESP array, not JSON."""
    assert lua("jobs", 0, "running", "queue") == []
    assert lua("jobs", 0, "complete") == []


def test_jobs_running_and_stalled(lua: Any) -> None:
    """Split locks by expiry against now, ascending expiry."""
    running(lua, "a", 0)
    running(lua, "b", 30)
    running(lua, "c", 10)
    assert lua("jobs", 20, "running", "queue") == ["a", "c", "b"]
    assert lua("jobs", 75, "stalled", "queue") == ["a", "c"]
    assert lua("jobs", 75, "running", "queue") == ["b"]


def test_jobs_scheduled_promotes(lua: Any) -> None:
    """Promote due jobs, then list the rest by time."""
    put(lua, "a", delay=50)
    put(lua, "b", delay=10)
    put(lua, "c", delay=30)
    assert lua("jobs", 20, "scheduled", "queue") == ["c", "a"]
    assert lua.json("get", 20, "b")["state"] == "waiting"


def test_jobs_depends(lua: Any) -> None:
    """List depends jids by the time they entered."""
    put(lua, "a")
    put(lua, "y", now=2, depends=["a"])
    put(lua, "x", now=1, depends=["a"])
    assert lua("jobs", 5, "depends", "queue") == ["x", "y"]


def test_jobs_paging(lua: Any) -> None:
    """Honour offset and count."""
    for n in range(5):
        put(lua, f"j{n}", delay=10 + n)
    assert lua("jobs", 0, "scheduled", "queue", 1, 2) == ["j1", "j2"]


def test_jobs_missing_queue(lua: Any) -> None:
    """Require a queue for per-queue states."""
    with pytest.raises(redis.ResponseError, match=r'Jobs\(\): Arg "queue" missing'):
        lua("jobs", 0, "running")


def test_jobs_unknown_state(lua: Any) -> None:
    """Refuse unknown states."""
    with pytest.raises(redis.ResponseError, match=r'Jobs\(\): Unknown type "bogus"'):
        lua("jobs", 0, "bogus", "queue")


# -- queues / length ----------------------------------------------------------------------------


def test_queues_empty(lua: Any) -> None:
    """Reply `{}` when no queue is known."""
    assert lua("queues", 0) == "{}"


def test_queue_counts(lua: Any) -> None:
    """Count every state of one queue."""
    running(lua, "stale", 0)
    running(lua, "run", 10)
    put(lua, "w1", now=11)
    put(lua, "w2", now=11)
    put(lua, "s", now=11, delay=1000)
    put(lua, "d", now=11, depends=["w1"])
    lua("recur", 11, "queue", "rec", "klass", {}, "interval", 60, 5000)
    counts = lua.json("queues", 65, "queue")
    assert counts["name"] == "queue"
    assert (counts["waiting"], counts["running"], counts["stalled"]) == (2, 1, 1)
    assert (counts["scheduled"], counts["depends"], counts["recurring"]) == (1, 1, 1)
    assert counts["paused"] is False


def test_queues_in_first_seen_order(lua: Any) -> None:
    """List every known queue in first-seen order."""
    put(lua, "a", "zeta", now=1)
    put(lua, "b", "alpha", now=2)
    put(lua, "c", "zeta", now=3)
    assert [q["name"] for q in lua.json("queues", 5)] == ["zeta", "alpha"]


def test_queues_promotes_scheduled(lua: Any) -> None:
    """Promote due scheduled jobs before counting."""
    put(lua, delay=10)
    counts = lua.json("queues", 10, "queue")
    assert (counts["scheduled"], counts["waiting"]) == (0, 1)


def test_queues_unknown_queue(lua: Any) -> None:
    """An unknown queue reports zeros."""
    counts = lua.json("queues", 0, "nothing")
    assert counts["name"] == "nothing"
    assert counts["waiting"] == counts["running"] == counts["scheduled"] == 0


def test_length(lua: Any) -> None:
    """Count locks + work + scheduled, not depends or recurring."""
    running(lua, "c", 0)
    put(lua, "a", now=1)
    put(lua, "b", now=1, delay=100)
    put(lua, "d", now=1, depends=["a"])
    lua("recur", 1, "queue", "rec", "klass", {}, "interval", 60, 5000)
    assert lua("length", 500, "queue") == 3


# -- failed / unfail ----------------------------------------------------------------------------


def test_failed_groups(lua: Any) -> None:
    """Count failed jobs per group; `{}` when none."""
    assert lua("failed", 0) == "{}"
    failed(lua, "a", "g1")
    failed(lua, "b", "g1")
    failed(lua, "c", "g2")
    assert lua.json("failed", 0) == {"g1": 2, "g2": 1}


def test_failed_group_listing(lua: Any) -> None:
    """List a group's jids newest first with paging."""
    for n in range(4):
        failed(lua, f"j{n}", now=n)
    assert lua.json("failed", 9, "grp") == {"total": 4, "jobs": ["j3", "j2", "j1", "j0"]}
    assert lua.json("failed", 9, "grp", 1, 2) == {"total": 4, "jobs": ["j2", "j1"]}


def test_failed_unknown_group(lua: Any) -> None:
    """An unknown group has total 0."""
    assert lua.json("failed", 0, "nope")["total"] == 0


def test_unfail_moves_oldest(lua: Any, r: redis.Redis) -> None:
    """Move the `count` oldest failed jobs back to work."""
    for n in range(3):
        failed(lua, f"j{n}", now=n)
    assert lua("unfail", 10, "queue", "grp", 2) == 2
    assert r.lrange("ql:f:grp", 0, -1) == ["j2"]
    for jid in ("j0", "j1"):
        job = lua.json("get", 10, jid)
        assert (job["state"], job["queue"], job["worker"], job["remaining"]) == (
            "waiting", "queue", "", 5)
        assert job["history"][-1] == {"when": 10, "what": "put", "q": "queue"}
    assert r.zscore("ql:q:queue-work", "j0") == pytest.approx(-10 / 1e10)


def test_unfail_drops_empty_group(lua: Any, r: redis.Redis) -> None:
    """Remove the group once its list is empty (default count 25)."""
    failed(lua, "a")
    assert lua("unfail", 10, "queue", "grp") == 1
    assert not r.sismember("ql:failures", "grp")
    assert lua("unfail", 10, "queue", "grp") == 0


def test_fix_unfail_decrements_failed(lua: Any) -> None:
    """Decrement the `failed` statistic like put (docs/engine.md fix)."""
    failed(lua, "a")
    lua("unfail", 10, "queue", "grp")
    assert lua.json("stats", 10, "queue", 0)["failed"] == 0


# -- stats --------------------------------------------------------------------------------------


def test_stats_empty(lua: Any) -> None:
    """Report zeros and two 148-bucket histograms."""
    stats = lua.json("stats", 0, "queue", 0)
    assert (stats["retries"], stats["failed"], stats["failures"]) == (0, 0, 0)
    for kind in ("wait", "run"):
        assert (stats[kind]["count"], stats[kind]["mean"], stats[kind]["std"]) == (0, 0, 0)
        assert stats[kind]["histogram"] == [0] * 148


def test_stats_welford_mean_and_std(lua: Any) -> None:
    """Report the mean and the sample standard deviation."""
    waits = [2, 4, 4, 4, 5, 5, 7, 9]
    for n in range(len(waits)):
        put(lua, f"j{n}", now=0)
    for wait in waits:
        lua("pop", wait, "queue", "worker", 1)
    stats = lua.json("stats", 0, "queue", 0)["wait"]
    assert stats["count"] == 8
    assert stats["mean"] == pytest.approx(5)
    assert stats["std"] == pytest.approx(math.sqrt(32 / 7))


def write_out(lua: Any, now: float) -> None:
    """Have the engine write out the statistics samples it holds (a Redis 7 function holds
    them in memory for up to about a second, docs/engine.md "Held statistics"): any pop at
    least a second later does; under EVALSHA every call wrote its own already."""
    lua("pop", now + 1, "empty-queue", "worker", 1)


def test_stats_hash_layout(lua: Any, r: redis.Redis) -> None:
    """Store count, mean and vk in `ql:s:wait:<day>:<queue>`."""
    put(lua, now=1700000000)
    lua("pop", 1700000030, "queue", "worker", 1)
    write_out(lua, 1700000030)
    wait = r.hgetall(f"ql:s:wait:{DAY}:queue")
    assert float(wait["total"]) == 1
    assert float(wait["mean"]) == 30
    assert float(wait["vk"]) == 0
    assert wait["s30"] == "1"


def welford(samples: list[float]) -> tuple[int, float, float]:
    """Count, mean and vk of the samples, folded one at a time in the engine's order."""
    count, mean, vk = 0, 0.0, 0.0
    for v in samples:
        count += 1
        if count == 1:
            mean, vk = v, 0.0
        else:
            old = mean
            mean = mean + (v - mean) / count
            vk = vk + (v - mean) * (v - old)
    return count, mean, vk


def server_number_texts(x: float) -> tuple[str, str]:
    """Texts the server may store for a Lua number: Redis writes %.17g, Valkey 8 the shortest
    text that reads back as the same double (Python's repr); both are exact."""
    return f"{x:.17g}", repr(x)


@pytest.mark.parametrize("per_call", [1, 3])
def test_stats_hash_text_exact(lua: Any, r: redis.Redis, per_call: int) -> None:
    """One sample per call or several: the stored texts are Redis's own number formats."""
    for n in range(6):
        put(lua, f"j{n}", now=1700000000 + n * 0.1)
    pops = [1700000000.7, 1700000001.3] if per_call == 3 else [
        1700000000.7, 1700000000.9, 1700000001.1, 1700000001.3, 1700000001.5, 1700000001.7]
    waits = []
    for at in pops:
        for job in lua.json("pop", at, "queue", "worker", per_call):
            waits.append(at - (1700000000 + int(job["jid"][1:]) * 0.1))
    count, mean, vk = welford(waits)
    write_out(lua, pops[-1])
    wait = r.hgetall(f"ql:s:wait:{DAY}:queue")
    assert wait["total"] == str(count) == "6"
    assert wait["mean"] in server_number_texts(mean)
    assert wait["vk"] in server_number_texts(vk)
    assert sum(int(v) for k, v in wait.items() if k[0] in "smhd" and k[1:].isdigit()) == 6


def test_stats_day_bins(lua: Any) -> None:
    """Any time within a day selects that day's statistics."""
    put(lua, now=1700000000)
    lua("pop", 1700000030, "queue", "worker", 1)
    assert lua.json("stats", 0, "queue", DAY)["wait"]["count"] == 1
    assert lua.json("stats", 0, "queue", DAY + 86399.5)["wait"]["count"] == 1
    assert lua.json("stats", 0, "queue", DAY - 1)["wait"]["count"] == 0


@pytest.mark.parametrize(
    "wait,bucket",
    [(0, 0), (1, 1), (59, 59), (59.9, 59), (60, 60), (119, 60), (120, 61), (3599, 118),
     (3600, 119), (7199, 119), (7200, 120), (86399, 141), (86400, 142), (172800, 143),
     (518400, 147)],
)
def test_histogram_buckets(lua: Any, wait: float, bucket: int) -> None:
    """Place s0-s59, m1-m59, h1-h23, d1-d6 in the 148-element histogram."""
    put(lua, now=0)
    lua("pop", wait, "queue", "worker", 1)
    histogram = lua.json("stats", 0, "queue", wait)["wait"]["histogram"]
    assert histogram[bucket] == 1
    assert sum(histogram) == 1


def test_spans_shorter_than_the_stored_rounding_count_as_zero(lua: Any) -> None:
    """A put stored rounded up to the millisecond, then popped and completed within that
    millisecond: both samples land in the first bucket, none is negative."""
    put(lua, now=1700000000.0006)  # stored as ...000.001
    lua("pop", 1700000000.0007, "queue", "worker", 1)
    lua("complete", 1700000000.0008, "jid", "worker", "queue", {})
    stats = lua.json("stats", 0, "queue", 1700000000)
    for kind in ("wait", "run"):
        assert stats[kind]["count"] == 1 and stats[kind]["histogram"][0] == 1, kind
        assert stats[kind]["mean"] == 0, kind


def test_histogram_seventh_day_not_reported(lua: Any) -> None:
    """Count d7+ samples but leave them out of the histogram."""
    put(lua, now=0)
    lua("pop", 7 * 86400, "queue", "worker", 1)
    wait = lua.json("stats", 0, "queue", 7 * 86400)["wait"]
    assert wait["count"] == 1
    assert sum(wait["histogram"]) == 0


def test_stats_date_not_a_number(lua: Any) -> None:
    """Refuse a non-numeric date."""
    with pytest.raises(redis.ResponseError, match=r'Stats\(\): Arg "date"'):
        lua("stats", 0, "queue", "today")


# -- workers ------------------------------------------------------------------------------------


def test_workers_empty(lua: Any) -> None:
    """Reply `{}` with no workers."""
    assert lua("workers", 0) == "{}"


def test_workers_list(lua: Any) -> None:
    """List workers most recently seen first with job counts."""
    running(lua, "a", 0, "w1")
    running(lua, "b", 10, "w2")
    running(lua, "c", 10, "w2")
    assert lua.json("workers", 65) == [
        {"name": "w2", "jobs": 2, "stalled": 0},
        {"name": "w1", "jobs": 0, "stalled": 1},
    ]


def test_worker_detail(lua: Any) -> None:
    """List one worker's jobs and stalled jobs, descending expiry."""
    running(lua, "a", 0, "w1")
    running(lua, "b", 10, "w1")
    running(lua, "c", 20, "w1")
    assert lua.json("workers", 75, "w1") == {"jobs": ["c"], "stalled": ["b", "a"]}


def test_worker_detail_unknown(lua: Any) -> None:
    """An unknown worker has two empty lists."""
    assert lua.json("workers", 0, "nobody") == {"jobs": {}, "stalled": {}}


def test_workers_purged_after_max_age(lua: Any, r: redis.Redis) -> None:
    """Drop workers last seen max-worker-age ago, with their job sets."""
    running(lua, "a", 0, "old")
    lua("pop", 50, "queue", "young", 1)
    assert [w["name"] for w in lua.json("workers", 86400)] == ["young"]
    assert r.zscore("ql:workers", "old") is None
    assert not r.exists("ql:w:old:jobs")


def test_workers_custom_max_age(lua: Any) -> None:
    """Honour `max-worker-age`."""
    lua("config.set", 0, "max-worker-age", 100)
    lua("pop", 0, "queue", "w1", 1)
    assert lua.json("workers", 99)[0]["name"] == "w1"
    assert lua("workers", 100) == "{}"


def test_worker_deregister(lua: Any, r: redis.Redis) -> None:
    """Remove the name from the list only."""
    running(lua, "a", 0, "w1")
    assert lua("worker.deregister", 1, "w1") is None
    assert lua("workers", 2) == "{}"
    assert r.zscore("ql:w:w1:jobs", "a") == 60


# -- pause / unpause / forget -------------------------------------------------------------------


def test_pause_and_unpause(lua: Any, r: redis.Redis) -> None:
    """Keep paused names in the set `ql:paused_queues`."""
    put(lua)
    assert lua("pause", 0, "queue", "other") is None
    assert r.smembers("ql:paused_queues") == {"queue", "other"}
    assert lua.json("queues", 0, "queue")["paused"] is True
    assert lua("unpause", 0, "queue") is None
    assert r.smembers("ql:paused_queues") == {"other"}
    assert lua.json("queues", 0, "queue")["paused"] is False


def test_queue_forget(lua: Any, r: redis.Redis) -> None:
    """Hide a queue from `queues` until the next put."""
    put(lua)
    assert lua("queue.forget", 0, "queue") is None
    assert lua("queues", 0) == "{}"
    assert r.zscore("ql:q:queue-work", "jid") is not None
    put(lua, "again", now=5)
    assert r.zscore("ql:queues", "queue") == 5


# -- priority -----------------------------------------------------------------------------------


def test_priority_on_waiting_job(lua: Any, r: redis.Redis) -> None:
    """Set the score to exactly the priority and reply with it."""
    put(lua, now=100)
    assert lua("priority", 200, "jid", 3) == 3
    assert r.zscore("ql:q:queue-work", "jid") == 3
    assert lua.json("get", 0, "jid")["priority"] == 3


def test_priority_reorders(lua: Any) -> None:
    """A raised priority pops first."""
    put(lua, "a", now=1)
    put(lua, "b", now=2)
    lua("priority", 3, "b", 1)
    assert lua.json("pop", 4, "queue", "worker", 1)[0]["jid"] == "b"


def test_priority_on_running_job(lua: Any, r: redis.Redis) -> None:
    """Update only the field of a job that is not waiting."""
    running(lua)
    assert lua("priority", 1, "jid", -4) == -4
    assert r.zscore("ql:q:queue-work", "jid") is None
    assert lua.json("get", 1, "jid")["priority"] == -4


def test_priority_missing_job(lua: Any) -> None:
    """Refuse an unknown job."""
    with pytest.raises(redis.ResponseError, match=r"Priority\(\): Job nope does not exist"):
        lua("priority", 0, "nope", 1)


# -- log and history ----------------------------------------------------------------------------


def test_log(lua: Any) -> None:
    """Append an entry with the message and the data's keys."""
    put(lua)
    assert lua("log", 12.5, "jid", "checkpoint", {"step": 3, "of": "x"}) is None
    assert lua.json("get", 13, "jid")["history"][-1] == {
        "when": 12, "what": "checkpoint", "step": 3, "of": "x"}


def test_log_without_data(lua: Any) -> None:
    """Data is optional."""
    put(lua)
    lua("log", 5, "jid", "note")
    assert lua.json("get", 5, "jid")["history"][-1] == {"when": 5, "what": "note"}


def test_log_missing_job(lua: Any) -> None:
    """Refuse an unknown job."""
    with pytest.raises(redis.ResponseError, match=r"Log\(\): Job nope does not exist"):
        lua("log", 0, "nope", "msg")


def test_history_truncation(lua: Any) -> None:
    """Keep the first entry and the latest n-1 (max-job-history 5, 100 puts)."""
    lua("config.set", 0, "max-job-history", 5)
    for n in range(100):
        put(lua, now=n)
    assert [h["when"] for h in lua.json("get", 100, "jid")["history"]] == [0, 96, 97, 98, 99]


def test_history_default_cap_is_100(lua: Any, r: redis.Redis) -> None:
    """Cap history at 100 entries by default."""
    for n in range(150):
        put(lua, now=n)
    history = lua.json("get", 200, "jid")["history"]
    assert [h["when"] for h in history] == [0, *range(51, 150)]
    assert r.llen("ql:j:jid-history") == 100


def test_history_legacy_field_migrated(lua: Any, r: redis.Redis) -> None:
    """Expand an old `history` hash field into list entries on read."""
    put(lua)
    r.delete("ql:j:jid-history")
    r.hset("ql:j:jid", "history", '[{"q": "queue", "put": 10, "popped": 20, "worker": "w"}]')
    history = lua.json("get", 30, "jid")["history"]
    assert [h["what"] for h in history] == ["put", "popped"]
    assert history[0]["when"] == 10 and history[1]["worker"] == "w"


def test_history_unlimited_with_zero(lua: Any, r: redis.Redis) -> None:
    """max-job-history 0 does not cap history (only n > 0 trims)."""
    lua("config.set", 0, "max-job-history", 0)
    for n in range(120):
        put(lua, now=n)
    assert r.llen("ql:j:jid-history") == 120


# -- wait statistics sources -------------------------------------------------------------


def wait_stats(lua: Any, day: float = 0) -> Any:
    """Return the wait statistics of `queue` for the day of `day`."""
    return lua.json("stats", 0, "queue", day)["wait"]


def test_wait_of_several_jobs_in_one_pop(lua: Any) -> None:
    """One pop of four jobs records four samples."""
    for n in range(4):
        put(lua, f"j{n}", now=n)
    lua("pop", 10, "queue", "worker", 4)
    wait = wait_stats(lua)
    assert wait["count"] == 4
    assert wait["mean"] == pytest.approx(8.5)
    assert wait["std"] == pytest.approx(math.sqrt(5 / 3))
    assert [wait["histogram"][n] for n in range(7, 11)] == [1, 1, 1, 1]


def test_wait_includes_delay(lua: Any) -> None:
    """Promotion does not reset the clock: the wait includes the delay."""
    put(lua, now=0, delay=20)
    lua("pop", 25, "queue", "worker", 1)
    assert wait_stats(lua)["mean"] == 25


def test_wait_after_lock_loss_counts_from_previous_pop(lua: Any) -> None:
    """A re-dispatched job's wait counts from its previous pop."""
    put(lua, now=0)
    lua("pop", 10, "queue", "worker", 1)
    lua("pop", 70, "queue", "w2", 1)
    lua("pop", 80, "queue", "w2", 1)
    wait = wait_stats(lua)
    assert wait["count"] == 2
    assert wait["histogram"][10] == 1
    assert wait["histogram"][61] == 0 and wait["histogram"][60] == 1  # 70 s is m1


def test_wait_after_advance_counts_from_completion(lua: Any) -> None:
    """An advanced job's wait counts from its completion in the previous queue."""
    running(lua, "jid", 0, queue="first")
    lua("complete", 30, "jid", "worker", "first", {}, "next", "queue")
    lua("pop", 35, "queue", "worker", 1)
    assert wait_stats(lua)["mean"] == 5


def test_run_histogram(lua: Any) -> None:
    """Record run times in the run histogram of the completion's day."""
    running(lua, "a", 0)
    lua("complete", 90, "a", "worker", "queue", {})
    run = lua.json("stats", 0, "queue", 90)["run"]
    assert (run["count"], run["mean"], run["std"]) == (1, 90, 0)
    assert run["histogram"][60] == 1


def test_unfail_leaves_queues_alone(lua: Any, r: redis.Redis) -> None:
    """Unfail into a new queue does not register it in `ql:queues`."""
    failed(lua, "a")
    lua("unfail", 10, "fresh", "grp")
    assert r.zscore("ql:queues", "fresh") is None
    assert r.zscore("ql:q:fresh-work", "a") is not None


def test_unfail_keeps_failure_record(lua: Any) -> None:
    """Unfail does not clear the failure record."""
    failed(lua, "a")
    lua("unfail", 10, "queue", "grp")
    assert lua.json("get", 10, "a")["failure"]["group"] == "grp"


def test_wait_stats_merge_across_calls(lua: Any) -> None:
    """Samples recorded by separate calls and by one multi-job pop combine exactly."""
    for jid, at in (("a", 0), ("b", 0), ("c", 6), ("d", 5), ("e", 1)):
        put(lua, jid, now=at)
    lua("pop", 2, "queue", "worker", 1)  # a or b waits 2
    lua("pop", 4, "queue", "worker", 1)  # the other waits 4
    lua("pop", 10, "queue", "worker", 3)  # e 9, d 5, c 4
    wait = wait_stats(lua)
    waits = [2, 4, 9, 5, 4]
    mean = sum(waits) / 5
    assert wait["count"] == 5
    assert wait["mean"] == pytest.approx(mean)
    assert wait["std"] == pytest.approx(math.sqrt(sum((w - mean) ** 2 for w in waits) / 4))


def test_priority_on_complete_job(lua: Any, r: redis.Redis) -> None:
    """Only the field changes for a completed job (queue "")."""
    running(lua)
    lua("complete", 1, "jid", "worker", "queue", {})
    assert lua("priority", 2, "jid", 7) == 7
    assert lua.json("get", 2, "jid")["priority"] == 7
    assert r.zcard("ql:q:queue-work") == 0


def test_recur_readds_forgotten_queue(lua: Any, r: redis.Redis) -> None:
    """recur into a forgotten queue makes it known again."""
    put(lua)
    lua("queue.forget", 1, "queue")
    lua("recur", 2, "queue", "rec", "klass", {}, "interval", 60, 0)
    assert r.zscore("ql:queues", "queue") == 2


def test_fix_priority_keeps_a_stalled_job_first(lua: Any, r: redis.Redis) -> None:
    """A timed-out job stays at +inf in the work set; only the field changes."""
    running(lua)
    lua("timeout", 1, "jid")
    assert lua("priority", 2, "jid", 7) == 7
    assert r.zscore("ql:q:queue-work", "jid") == float("inf")
    assert lua.json("get", 2, "jid")["priority"] == 7
