"""Fault injection on the forking worker: killed children, killed supervisor, poison jobs."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.worker.conftest import alive, cmdline, wait_until
from tests.worker.jobs import ledger

pytestmark = [pytest.mark.fault, pytest.mark.timeout(60)]


def test_sigkill_child_mid_job_job_comes_back_and_completes_once(
    short_leases, start_worker
):
    qless_client = short_leases
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "1")
    worker.wait_children(1)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 1}, retries=5)
    first = wait_until(lambda: ledger(qless_client.redis, "started", jid))[0]
    os.kill(first["pid"], signal.SIGKILL)
    # A replacement child appears; the job is re-offered after heartbeat + grace.
    t0 = time.monotonic()
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=15)
    elapsed = time.monotonic() - t0
    assert elapsed < 2 + 1 + 5  # heartbeat + grace + slack
    starts = ledger(qless_client.redis, "started", jid)
    assert len(starts) == 2 and starts[1]["pid"] != first["pid"]
    assert len(ledger(qless_client.redis, "done", jid)) == 1
    whats = [h["what"] for h in qless_client.jobs[jid].history]
    assert whats.count("popped") == 2 and whats[-1] == "done"
    assert worker.proc.poll() is None
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_sigkill_supervisor_leaves_no_child_behind(short_leases, start_worker):
    qless_client = short_leases
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "2")
    kids = worker.wait_children(2)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    worker.signal(signal.SIGKILL)
    worker.proc.wait(timeout=5)
    try:
        wait_until(lambda: not any(alive(k) for k in kids), timeout=5)
    except AssertionError:
        left = {k: cmdline(k) for k in kids if alive(k)}
        raise AssertionError(f"children left: {left}\n{worker.stderr()}") from None
    # The orphaned child released its job rather than leaving it to lease expiry.
    job = qless_client.jobs[jid]
    assert job.state == "waiting" and job.retries == job.original_retries
    assert not ledger(qless_client.redis, "done", jid)


def test_poison_job_exhausts_retries_while_others_complete(short_leases, start_worker):
    qless_client = short_leases
    q = qless_client.queues["q"]
    poison = q.put("tests.worker.jobs.suicide", {}, retries=2, priority=10)
    normal = [q.put("tests.worker.jobs.ok", {"n": i}) for i in range(20)]
    worker = start_worker("q", "-n", "2")
    wait_until(lambda: qless_client.jobs[poison].state == "failed", timeout=40)
    job = qless_client.jobs[poison]
    assert job.failure["group"] == "failed-retries-q"
    assert len(ledger(qless_client.redis, "started", poison)) == 3
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in normal))
    assert len(ledger(qless_client.redis, "done")) == 20
    assert worker.proc.poll() is None and len(worker.children()) == 2
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_second_term_kills_children_at_once(qless_client, start_worker):
    q = qless_client.queues["q"]
    # A job that ignores the first TERM's abort for a while (it sleeps in C, not Python).
    worker = start_worker("q", "-n", "1", "--shutdown-grace", "30", "--term-grace", "0")
    kids = worker.wait_children(1)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    os.kill(kids[0], signal.SIGSTOP)  # the child cannot react to TERM now
    worker.signal(signal.SIGTERM)
    time.sleep(0.5)
    assert alive(kids[0])
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=10) == 3
    assert not alive(kids[0])
    assert qless_client.jobs[jid].state == "waiting"


def test_term_to_whole_process_group(qless_client, start_worker):
    """systemd KillMode=control-group sends TERM to every process at once."""
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "2", "--term-grace", "0")  # (the job is given back now)
    kids = worker.wait_children(2)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    os.killpg(worker.pid, signal.SIGTERM)
    assert worker.wait(timeout=15) == 0
    assert not any(alive(k) for k in kids)
    assert qless_client.jobs[jid].state == "waiting"


def test_process_titles(qless_client, start_worker):
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "2")
    worker.wait_children(2)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 4})
    row = wait_until(lambda: ledger(qless_client.redis, "started", jid))[0]
    title = wait_until(lambda: (lambda t: t if " 1." in t or " 2." in t else None)(
        cmdline(row["pid"])), timeout=5)
    assert title.startswith(f"qless_worker[{row['worker']}]: running {jid[:4]}.. ")
    assert "tests.worker.jobs.sleepy q=q" in title and title.endswith("s")
    idle = [p for p in worker.children() if p != row["pid"]]
    wait_until(lambda: "idle waiting on q" in cmdline(idle[0]), timeout=5)
    sup = wait_until(lambda: (lambda t: t if "children=2/2" in t else None)(cmdline(worker.pid)))
    assert sup.startswith("qless_worker: supervisor queues=q children=2/2 paused=no done=")
    worker.signal(signal.SIGUSR2)
    wait_until(lambda: "paused=yes" in cmdline(worker.pid), timeout=5)
    worker.signal(signal.SIGCONT)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_fork_per_job_runs_each_job_in_a_fresh_process(qless_client, start_worker):
    q = qless_client.queues["q"]
    jids = [q.put("tests.worker.jobs.ok", {}) for _ in range(4)]
    worker = start_worker("q", "-n", "1", "--fork-per-job")
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in jids))
    pids = {r["pid"] for r in ledger(qless_client.redis, "done")}
    assert len(pids) == 4
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize("processes", ["0", "2"])
def test_heartbeat_keeps_a_job_longer_than_its_lease(short_leases, start_worker, processes):
    qless_client = short_leases
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", processes)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 5})
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=15)
    # Two leases' worth of time passed; it still ran once and no lock was lost.
    assert len(ledger(qless_client.redis, "started", jid)) == 1
    whats = [h["what"] for h in qless_client.jobs[jid].history]
    assert "timed-out" not in whats and whats.count("popped") == 1
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_max_duration_stops_gracefully(qless_client, start_worker):
    t0 = time.monotonic()
    worker = start_worker("q", "-n", "1", "--max-duration", "1")
    assert worker.wait(timeout=10) == 0
    assert 1 <= time.monotonic() - t0 < 6


@pytest.mark.parametrize("processes", ["0", "1"])
def test_pubsub_connections_killed_worker_resubscribes(qless_client, r, start_worker, processes):
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", processes, "--interval", "30")
    warm = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[warm].state == "complete")
    time.sleep(0.2)
    assert r.client_kill_filter(_type="pubsub") >= 1
    time.sleep(0.3)
    jid = q.put("tests.worker.jobs.ok", {})
    # Far sooner than the 30 s interval: the worker noticed and re-subscribed.
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=5)
    # And the lock-lost channel works again: a cancel still aborts a running job.
    slow = q.put("tests.worker.jobs.sleep_long", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", slow))
    qless_client.jobs[slow].cancel()
    after = q.put("tests.worker.jobs.ok", {})
    try:
        wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=10)
    except AssertionError:
        print(worker.stderr())
        raise
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
