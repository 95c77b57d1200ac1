"""Holding one job ahead while short jobs flow (see django_qless/core/workers/hand.py).

The worker sends a short job's completion without waiting and runs the job it holds while
Redis works. What must hold: every job runs once; the worker never holds more than one job
beyond the one it runs (more while completions are kept for a later call, test_pairs.py;
plus the ones whose completions are on their way); a long job hands the held
job back without spending its retry; max_jobs and `prefetch=False` are honoured; and a child
that dies gives back, through its supervisor, the job it held ahead.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.registry import Registry
from django_qless.core.workers import SerialWorker, WorkerConfig, hand
from django_qless.core.workers.hand import _DEPTH_KEPT, BATCH
from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)


def serial(redis_url: str, registry: Registry, **options: Any) -> SerialWorker:
    config = WorkerConfig(url=redis_url, queues=("q",), processes=0, registry=registry,
                          name="ahead", interval=0.5, **options)
    return SerialWorker(config, install_signals=False)


def run(worker: SerialWorker) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run_forever()), daemon=True)
    thread.start()
    return thread, codes


def counting_registry(redis_url: str, seen: list[tuple[str, int]]) -> Registry:
    """A registry whose job records its jid and how many jobs its worker holds right now."""
    probe = Client(redis_url)
    registry = Registry()
    registry.register("probe", lambda job: seen.append(
        (job.jid, len(probe.workers[job.worker_name]["jobs"]))))
    return registry


@pytest.mark.parametrize("prefetch", [True, False])
def test_short_jobs_run_once_and_the_worker_holds_at_most_one_ahead(
    redis_url: str, qless_client: Client, prefetch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Short whatever the load (a probe is one Redis read, under PREFETCH_BELOW when the
    # machine is quiet): what is counted below must not depend on the scheduler.
    monkeypatch.setattr(hand, "PREFETCH_BELOW", 60.0)
    seen: list[tuple[str, int]] = []
    jids = [qless_client.queues["q"].put("probe", {"n": i}) for i in range(300)]
    worker = serial(redis_url, counting_registry(redis_url, seen), max_jobs=300,
                    prefetch=prefetch)
    thread, codes = run(worker)
    thread.join(40)
    assert codes == [0]
    assert sorted(jid for jid, _ in seen) == sorted(jids)  # each ran exactly once
    assert all(qless_client.jobs[j].state == "complete" for j in jids)
    held = [n for _, n in seen]
    if prefetch:
        # Completions sent without waiting (a call carries up to BATCH: test_pairs.py).
        assert worker.hand.sent_ahead > 200
        # The running job, the kept ones and the ones held ahead (at most _DEPTH_KEPT
        # together), and at most one call's completions that Redis has not processed yet
        # (sent on another connection just before).
        assert max(held) <= _DEPTH_KEPT + BATCH
        assert sum(n >= 2 for n in held) > len(held) // 2  # it does hold one ahead
    else:
        assert worker.hand.sent_ahead == 0
        assert max(held) == 1  # each completion was answered before the next job started
    assert qless_client.workers["ahead"]["jobs"] == []


def test_a_long_job_hands_the_held_job_back_without_spending_a_retry(
    redis_url: str, qless_client: Client
) -> None:
    q = qless_client.queues["q"]
    during: dict[str, Any] = {}
    registry = Registry()
    registry.register("short", lambda job: None)

    def long(job: Any) -> None:
        time.sleep(0.4)  # the heartbeat thread hands back after 0.1 s
        held = qless_client.jobs["x"]
        during.update(state=held.state, worker=held.worker_name)

    registry.register("long", long)
    for n, priority in enumerate((10, 9, 8)):
        q.put("short", {}, jid=f"s{n}", priority=priority)
    q.put("long", {}, jid="long", priority=7)
    q.put("short", {}, jid="x", priority=0)
    worker = serial(redis_url, registry, max_jobs=5)
    thread, codes = run(worker)
    thread.join(20)
    assert codes == [0]
    assert during == {"state": "waiting", "worker": ""}
    assert worker.hand.handed_back == 1
    x = qless_client.jobs["x"]
    assert x.state == "complete"
    # Given back with `release` (a `put` entry), not by a lease running out (`timed-out`).
    assert [h["what"] for h in x.history] == ["put", "popped", "put", "popped", "done"]


def test_max_jobs_is_never_overshot_by_jobs_held_ahead(
    redis_url: str, qless_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A job holds the next ones ahead only if it ran under PREFETCH_BELOW (5 ms): on a
    # loaded machine every probe (one Redis read) could take longer, nothing would be held
    # ahead, and the cap would be tested without what may overshoot it. Every job counts
    # as short here, whatever the load.
    monkeypatch.setattr(hand, "PREFETCH_BELOW", 60.0)
    seen: list[tuple[str, int]] = []
    # (more tickets than a batch holds ahead: with fewer the worker may hold none ahead)
    cap = _DEPTH_KEPT + BATCH
    jids = [qless_client.queues["q"].put("probe", {"n": i}) for i in range(cap + 10)]
    worker = serial(redis_url, counting_registry(redis_url, seen), max_jobs=cap)
    thread, codes = run(worker)
    thread.join(20)
    assert codes == [0]
    assert len(seen) == cap and worker.hand.sent_ahead + worker.hand.carried > 0
    # Jobs were held ahead while others ran (the running one and at least one more).
    assert max(n for _, n in seen) >= 2
    states = [qless_client.jobs[j].state for j in jids]
    assert states.count("complete") == cap and states.count("waiting") == 10
    assert qless_client.workers["ahead"]["jobs"] == []


def test_stop_request_hands_back_the_job_held_ahead(redis_url: str, qless_client: Client) -> None:
    q = qless_client.queues["q"]
    registry = Registry()
    registry.register("short", lambda job: None)
    stop_now: dict[str, SerialWorker] = {}

    def stopper(job: Any) -> None:
        stop_now["w"].request_stop(graceful=True)

    registry.register("stopper", stopper)
    for n in range(3):
        q.put("short", {}, jid=f"s{n}", priority=10 - n)
    q.put("stopper", {}, jid="stop", priority=5)
    q.put("short", {}, jid="x", priority=0)
    worker = stop_now["w"] = serial(redis_url, registry)
    thread, codes = run(worker)
    thread.join(20)
    assert codes == [0]
    assert qless_client.jobs["stop"].state == "complete"
    x = qless_client.jobs["x"]
    # Held ahead or never taken: either way back to waiting, nothing spent, nothing held.
    assert x.state == "waiting" and x.retries == x.original_retries
    assert qless_client.workers["ahead"]["jobs"] == []


def test_a_crashed_child_hands_back_the_jobs_it_held_ahead(qless_client: Client,
                                                          start_worker) -> None:
    """The supervisor releases it at once: no waiting for the lease (60 s here)."""
    q = qless_client.queues["q"]
    for n in range(3):
        q.put("tests.worker.jobs.ok", {}, jid=f"ok{n}", priority=10 - n)
    q.put("tests.worker.jobs.suicide", {}, jid="poison", priority=5, retries=0)
    q.put("tests.worker.jobs.ok", {}, jid="x", priority=0)
    worker = start_worker("q", "-n", "1")
    wait_until(lambda: ledger(qless_client.redis, "done", "x"), timeout=15)
    # The job body writes the ledger before the worker sends its completion.
    wait_until(lambda: qless_client.jobs["x"].state == "complete", timeout=15)
    x = qless_client.jobs["x"]
    # Held ahead when the child crashed (the usual case): given back at once, then run; on a
    # loaded machine the child may not have held it (jobs slower than the hold threshold).
    # Either way it finished well inside its 60 s lease, so it never waited for it.
    assert [h["what"] for h in x.history] in (
        ["put", "popped", "put", "popped", "done"], ["put", "popped", "done"])
    assert qless_client.jobs["poison"].state == "running"  # left to its lease: a crash counts
    assert len(ledger(qless_client.redis, "started", "x")) == 1
    worker.kill_all()


def test_killing_children_while_short_jobs_flow_spends_retries_only_of_running_jobs(
    short_leases: Client, start_worker
) -> None:
    """Each SIGKILL costs at most the job that child was running one retry; the jobs it
    held ahead go back untouched, and every job completes once."""
    qless_client = short_leases
    q = qless_client.queues["q"]
    jids = [j for n in range(0, 800, 200) for j in q.put_many(
        [{"klass": "tests.worker.jobs.brief", "data": {"n": i}, "retries": 5}
         for i in range(n, n + 200)])]
    worker = start_worker("q", "-n", "2")
    worker.wait_children(2)
    wait_until(lambda: ledger(qless_client.redis, "done"))
    kills = 0
    for _ in range(5):
        kids = worker.children()
        if kids and qless_client.queues["q"].counts["waiting"] > 50:
            os.kill(random.choice(kids), signal.SIGKILL)
            kills += 1
        time.sleep(0.1)
    assert kills >= 3
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in jids), timeout=40)
    # (A completed job's retries are reset: its history tells whether a lease ran out.)
    histories = [[h["what"] for h in qless_client.jobs[j].history] for j in jids]
    assert sum("timed-out" in h for h in histories) <= kills
    assert all(h.count("done") == 1 for h in histories)
    worker.kill_all()


@pytest.mark.parametrize("delay", [0.0, 0.05, 0.2])
def test_term_while_short_jobs_flow_leaves_nothing_held(
    qless_client: Client, start_worker, delay: float
) -> None:
    """TERM with completions in flight and jobs held ahead: all released or completed."""
    q = qless_client.queues["q"]
    jids = q.put_many([{"klass": "tests.worker.jobs.brief", "data": {"n": i}}
                       for i in range(400)])
    worker = start_worker("q", "-n", "2", "--term-grace", "0")  # (aborts, not drains)
    wait_until(lambda: ledger(qless_client.redis, "done"))
    time.sleep(delay)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    jobs = [qless_client.jobs[j] for j in jids]
    assert {j.state for j in jobs} <= {"waiting", "complete"}
    assert any(j.state == "waiting" for j in jobs)
    assert qless_client.queues["q"].counts["running"] == 0
    assert all(w["jobs"] == 0 for w in qless_client.workers.counts)
    for job in jobs:
        whats = [h["what"] for h in job.history]
        assert "timed-out" not in whats
        assert whats.count("done") == (1 if job.state == "complete" else 0)
