"""Fault injection on real worker processes (`python -m django_qless.core.workers`).

tests/worker/test_faults.py and test_lifecycle.py already cover: SIGKILL of a child (one job),
SIGKILL of the supervisor (no child left), the poison job, TERM/INT release, double TERM,
TERM to the process group, USR1/USR2/CONT. This file covers what they do not: a killed
supervisor with every child busy, a stopped child losing its lease, QUIT leaving the queue
alone, TERM while Redis is unreachable, TERM at random moments, SCRIPT FLUSH under load, a
Redis crash and AOF restart, CLIENT PAUSE, the start-up eviction warning, dependencies
across a killed worker (with the history and retry accounting of a killed child) and the
throttle slot of a killed child (catalogue: docs/faults.md).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from django_qless.core.client import Client
from django_qless.core.exceptions import DependencyError, QlessConnectionError
from tests.faults.conftest import alive, assert_audit_clean, wait_until

pytestmark = [pytest.mark.fault, pytest.mark.timeout(120)]

WORK = "tests.faults.jobs.work"


def states(qless_client: Client, jids: list[str]) -> dict[str, int]:
    """Count jobs per state."""
    out: dict[str, int] = {}
    for jid in jids:
        s = qless_client.jobs[jid].state
        out[s] = out.get(s, 0) + 1
    return out


def all_complete(qless_client: Client, jids: list[str]) -> bool:
    return states(qless_client, jids) == {"complete": len(jids)}


def test_killed_supervisor_with_every_child_busy(short_leases, start_worker, ledger):
    qless_client = short_leases
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "4")
    kids = worker.wait_children(4)
    jids = [q.put(WORK, {"seconds": 3}) for _ in range(4)]
    wait_until(lambda: len(ledger.rows("started")) == 4)
    worker.signal(signal.SIGKILL)
    worker.wait(timeout=5)
    time.sleep(1)
    lingering = {k: _signal_state(k) for k in kids if alive(k)}  # evidence if this fails
    wait_until(lambda: not any(alive(k) for k in kids), timeout=10)
    again = start_worker("q", "-n", "2")
    wait_until(lambda: all_complete(qless_client, jids), timeout=30)
    assert {r["jid"] for r in ledger.rows("done")} == set(jids)
    assert all(len(ledger.rows("done", j)) == 1 for j in jids), (ledger.rows("done"), lingering)
    again.signal(signal.SIGQUIT)
    assert again.wait() == 0
    assert_audit_clean(qless_client)


def test_stopped_child_loses_its_lease_and_its_late_complete_is_refused(
    short_leases, start_worker, ledger
):
    qless_client = short_leases
    q = qless_client.queues["q"]
    a = start_worker("q", "-n", "1", "--name", "worker-A")
    a.wait_children(1)
    jid = q.put(WORK, {"seconds": 3})
    first = wait_until(lambda: ledger.rows("started", jid))[0]
    os.kill(first["pid"], signal.SIGSTOP)  # hung child: no heartbeat, no progress
    b = start_worker("q", "-n", "1", "--name", "worker-B")
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=30)
    assert qless_client.jobs[jid].history[-1]["what"] == "done"
    # A's supervisor learnt of the lost lock (lock_lost event) and killed the hung child;
    # if it had not, waking the child must still not produce a second completion.
    if alive(first["pid"]):
        os.kill(first["pid"], signal.SIGCONT)
        time.sleep(3.5)
    wait_until(lambda: not alive(first["pid"]), timeout=10)
    job = qless_client.jobs[jid]
    assert job.state == "complete"
    assert [h["what"] for h in job.history].count("done") == 1  # one accepted completion
    starts = ledger.rows("started", jid)
    assert len(starts) == 2 and starts[1]["pid"] != first["pid"]
    assert first["worker"].startswith("worker-A")
    assert len(ledger.rows("done", jid)) == 1 and ledger.effects() == 1
    assert a.proc.poll() is None and b.proc.poll() is None
    after = q.put(WORK, {})
    wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=15)
    for w in (a, b):
        w.signal(signal.SIGQUIT)
        assert w.wait() == 0
    assert_audit_clean(qless_client)


def test_quit_finishes_running_jobs_and_leaves_the_queue_alone(
    qless_client, start_worker, ledger
):
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "2")
    worker.wait_children(2)
    busy = [q.put(WORK, {"seconds": 2}) for _ in range(2)]
    wait_until(lambda: len(ledger.rows("started")) == 2)
    queued = [q.put(WORK, {}) for _ in range(10)]
    worker.signal(signal.SIGQUIT)
    assert worker.wait(timeout=20) == 0
    assert all_complete(qless_client, busy)
    assert states(qless_client, queued) == {"waiting": 10}
    assert len(ledger.rows("started")) == 2
    assert_audit_clean(qless_client)


@pytest.mark.parametrize("delay", [0.0, 0.1, 0.35])
def test_term_at_any_moment_never_orphans_a_popped_job(
    qless_client, start_worker, ledger, delay
):
    q = qless_client.queues["q"]
    jids = [q.put(WORK, {"seconds": 0.05}) for _ in range(40)]
    worker = start_worker("q", "-n", "2", "--term-grace", "0")
    wait_until(lambda: ledger.rows("started"), timeout=15)
    time.sleep(delay)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    counts = states(qless_client, jids)
    assert set(counts) <= {"waiting", "complete"}, counts
    assert qless_client.queues["q"].counts["running"] == 0
    assert_audit_clean(qless_client)


def test_script_flush_under_load(qless_client, tcp_redis, rconn, start_worker, ledger):
    q = qless_client.queues["q"]
    jids = [j for i in range(0, 400, 100)
            for j in q.put_many([{"klass": WORK, "data": {}} for _ in range(100)])]
    workers = [start_worker("q", "-n", "2") for _ in range(2)]
    stop = threading.Event()
    flushes = 0

    def flusher() -> None:
        nonlocal flushes
        while not stop.wait(0.2):
            rconn.script_flush()
            flushes += 1

    t = threading.Thread(target=flusher, daemon=True)
    t.start()
    try:
        # Observe with plain reads: the test's own script calls would race the flusher too.
        wait_until(lambda: rconn.zcard("ql:completed") == 400, timeout=90, step=0.2)
    finally:
        stop.set()
        t.join()
    assert flushes >= 2
    assert all_complete(qless_client, jids)
    done = ledger.rows("done")
    assert len(done) == 400 and len({r["jid"] for r in done}) == 400
    assert qless_client.jobs.failed() == {}
    assert all(w.proc.poll() is None for w in workers)
    for w in workers:
        w.signal(signal.SIGQUIT)
        assert w.wait() == 0
    assert_audit_clean(qless_client)


def test_redis_crash_and_aof_restart(short_leases, tcp_redis, start_worker, ledger):
    qless_client = short_leases
    qless_client.config["heartbeat"] = 5
    q = qless_client.queues["q"]
    jids = q.put_many([{"klass": WORK, "data": {"seconds": 0.05}} for _ in range(150)])
    worker = start_worker("q", "-n", "2")
    wait_until(lambda: len(ledger.rows("done")) >= 20, timeout=30)
    tcp_redis.crash()
    with pytest.raises(QlessConnectionError):
        Client(tcp_redis.url).queues["q"].put(WORK, {}, jid="during-outage")
    time.sleep(3)
    tcp_redis.start()
    fresh = Client(tcp_redis.url)
    # Every acknowledged put survived (AOF always); the refused one does not exist.
    assert all(fresh.jobs.get(j) is not None for j in jids)
    assert fresh.jobs.get("during-outage") is None
    wait_until(lambda: all_complete(fresh, jids), timeout=60, step=0.2)
    assert worker.proc.poll() is None
    assert {r["jid"] for r in ledger.rows("done")} == set(jids)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert_audit_clean(fresh)


def test_redis_stall_is_transient(qless_client, rconn, start_worker, ledger):
    q = qless_client.queues["q"]
    jids = q.put_many([{"klass": WORK, "data": {"seconds": 0.05}} for _ in range(80)])
    worker = start_worker("q", "-n", "2")
    wait_until(lambda: len(ledger.rows("done")) >= 10, timeout=20)
    rconn.client_pause(3000, all=True)
    time.sleep(3.2)
    wait_until(lambda: all_complete(qless_client, jids), timeout=40, step=0.2)
    assert qless_client.jobs.failed() == {}
    assert worker.proc.poll() is None
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert_audit_clean(qless_client)


def test_dependencies_survive_a_killed_worker(short_leases, start_worker, ledger):
    qless_client = short_leases
    q = qless_client.queues["q"]
    a = q.put("tests.faults.jobs.kill_once", {"seconds": 0.2}, retries=5)
    b = q.put(WORK, {}, depends=[a])
    doomed = q.put("tests.faults.jobs.suicide", {}, retries=0)
    blocked = q.put(WORK, {}, depends=[doomed])
    worker = start_worker("q", "-n", "1")
    wait_until(lambda: qless_client.jobs[b].state == "complete", timeout=40)
    wait_until(lambda: qless_client.jobs[doomed].state == "failed", timeout=20)
    job_a = qless_client.jobs[a]
    whats = [h["what"] for h in job_a.history if h["what"] in ("popped", "timed-out", "done")]
    assert whats == ["popped", "timed-out", "popped", "done"]  # killed: timed out, run again
    assert job_a.retries == job_a.original_retries == 5  # 5 -> 4 on lease loss, reset on done
    assert len(ledger.rows("started", b)) == 1  # released exactly once
    assert qless_client.jobs[blocked].state == "depends"  # stays visible, not lost
    with pytest.raises(DependencyError):
        qless_client.jobs[doomed].cancel()
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert_audit_clean(qless_client)


def test_throttle_slot_of_a_killed_child_comes_back(
    short_leases, rconn, start_worker, ledger
):
    qless_client = short_leases
    qless_client.throttles["t"].set(2)
    q = qless_client.queues["q"]
    jids = [q.put(WORK, {"seconds": 0.5}, throttles=["t"]) for _ in range(10)]
    most = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.01):
            most[0] = max(most[0], rconn.zcard("ql:th:t-locks"))

    t = threading.Thread(target=sample, daemon=True)
    t.start()
    worker = start_worker("q", "-n", "3")
    first = wait_until(lambda: ledger.rows("started"), timeout=15)[0]
    os.kill(first["pid"], signal.SIGKILL)
    try:
        wait_until(lambda: all_complete(qless_client, jids), timeout=60, step=0.1)
    finally:
        stop.set()
        t.join()
    assert most[0] <= 2
    assert rconn.zcard("ql:th:t-locks") == 0 and rconn.zcard("ql:th:t-pending") == 0
    assert len(ledger.rows("started", first["jid"])) == 2
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert_audit_clean(qless_client)


def test_worker_reports_an_evicting_redis_at_start(qless_client, rconn, start_worker):
    rconn.config_set("maxmemory-policy", "allkeys-lru")
    try:
        worker = start_worker("q", "-n", "1")
        wait_until(lambda: "maxmemory-policy" in worker.stderr(), timeout=15)
        assert "allkeys-lru" in worker.stderr() and "noeviction" in worker.stderr()
        # The warning comes before the signal handlers are installed: QUIT once they are.
        wait_until(lambda: "started child" in worker.stderr(), timeout=15)
        worker.signal(signal.SIGQUIT)
        assert worker.wait() == 0
    finally:
        rconn.config_set("maxmemory-policy", "noeviction")
    assert_audit_clean(qless_client)


@pytest.mark.parametrize("outage", ["closed", "half-open"])
def test_term_while_redis_is_unreachable_job_returns_by_lease(
    short_leases, proxy, start_worker, ledger, outage
):
    qless_client = short_leases
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "1", "--shutdown-grace", "2", "--term-grace", "0",
                          url=proxy.url)
    jid = q.put(WORK, {"seconds": 30}, retries=3)
    wait_until(lambda: ledger.rows("started", jid), timeout=15)
    if outage == "closed":
        proxy.close()  # connections cut, new ones refused
    else:
        proxy.freeze(new_too=True)  # sockets stay open (and new ones open), nothing flows
    t0 = time.monotonic()
    worker.signal(signal.SIGTERM)
    code = worker.wait(timeout=90)
    stopped = time.monotonic() - t0
    print(f"TERM with Redis {outage}: exit {code} after {stopped:.1f}s")
    assert code == 4  # stopped, but the job could not be released
    # Closed: immediate. Half-open: the shutdown grace, then short-timeout release calls
    # that give up at the first silent one.
    assert stopped < (5 if outage == "closed" else 15)
    # The lease runs out and another worker gets the job (one retry spent).
    wait_until(lambda: q.pop(), timeout=10)
    job = qless_client.jobs[jid]
    assert job.state == "running" and job.retries == 2
    job.complete()
    assert_audit_clean(qless_client)


def _signal_state(pid: int) -> dict[str, str]:
    """Return each thread's pending, blocked and caught signal masks (for failure messages)."""
    out = {}
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                out[tid] = " ".join(x.strip() for x in f
                                    if x.startswith(("SigPnd", "ShdPnd", "SigBlk", "SigCgt")))
    except OSError:
        pass  # gone meanwhile
    return out


def _blocked_signals(pid: int, tid: int) -> int:
    """Return the blocked-signal mask of one thread of a live process."""
    with open(f"/proc/{pid}/task/{tid}/status") as f:
        line = next(x for x in f if x.startswith("SigBlk:"))
    return int(line.split()[1], 16)


def test_helper_threads_leave_signals_to_the_job_thread(qless_client, start_worker, ledger):
    """Every thread but the one running the job blocks TERM, so a TERM (or the parent-death
    signal) interrupts the job's sleep at once instead of waiting for it to end."""
    q = qless_client.queues["q"]
    worker = start_worker("q", "-n", "1", "--term-grace", "0")
    worker.wait_children(1)
    jid = q.put(WORK, {"seconds": 5})
    child = wait_until(lambda: ledger.rows("started", jid))[0]["pid"]
    term = 1 << (signal.SIGTERM - 1)
    for pid in (child, worker.pid):
        helpers = [int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid]
        assert not _blocked_signals(pid, pid) & term
        for tid in helpers:
            assert _blocked_signals(pid, tid) & term, (pid, tid)
        if pid == child:
            assert helpers  # the heartbeat thread at least: the check above ran
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=10) == 0
    assert not ledger.rows("done", jid)  # aborted mid-sleep, released for another worker
    assert qless_client.jobs[jid].state == "waiting"
