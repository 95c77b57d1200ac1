"""One lifecycle contract, run against the serial (-n 0) and the forking (-n 2) worker."""

from __future__ import annotations

import os
import signal
import time

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import alive, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)

MODES = {"serial": ["-n", "0"], "forking": ["-n", "2"]}


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


def registered(qless_client: Client, n: int) -> list[str]:
    """Wait until `n` workers have registered (they reserve as soon as they start)."""
    return wait_until(lambda: (lambda w: w if len(w) >= n else None)(
        [w["name"] for w in qless_client.workers.counts]), timeout=10)


def test_jobs_complete_fail_and_unknown_klass_is_never_imported(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    oks = [q.put("tests.worker.jobs.ok", {"n": i}) for i in range(5)]
    bad = q.put("tests.worker.jobs.boom", {"n": 7})
    unknown = q.put("tests.worker.jobs_not_registered.Evil", {})
    worker = start_worker("q", *mode)
    wait_until(lambda: all(qless_client.jobs[j].state in ("complete", "failed")
                           for j in [*oks, bad, unknown]))
    assert [qless_client.jobs[j].state for j in oks] == ["complete"] * 5
    failure = qless_client.jobs[bad].failure
    assert failure["group"] == "builtins.ValueError"
    assert "Traceback (most recent call last)" in failure["message"]
    assert "ValueError: boom 7" in failure["message"]
    assert qless_client.jobs[unknown].failure["group"] == "django_qless.UnknownJob"
    assert "not a registered job" in qless_client.jobs[unknown].failure["message"]
    # Every job ran exactly once.
    assert sorted(r["jid"] for r in ledger(qless_client.redis, "done")) == sorted(oks)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_self_settled_jobs_routing_middleware_and_sandbox(qless_client, start_worker, mode):
    q = qless_client.queues["special"]
    done_itself = q.put("tests.worker.jobs.self_complete", {})
    retried = q.put("tests.worker.jobs.self_retry", {}, retries=0)
    routed = q.put("tests.worker.jobs.Routed", {})
    wrapped = q.put("tests.worker.jobs.wrapped", {})
    sandboxed = q.put("tests.worker.jobs.sandboxed", {})
    worker = start_worker("special", *mode)
    wait_until(lambda: all(qless_client.jobs[j].state in ("complete", "failed")
                           for j in (done_itself, retried, routed, wrapped, sandboxed)))
    assert qless_client.jobs[done_itself].state == "complete"
    # retry with retries=0 fails the job: the worker must not complete it afterwards.
    assert qless_client.jobs[retried].state == "failed"
    assert qless_client.jobs[retried].failure["group"] == "tests.Retry"
    assert ledger(qless_client.redis, "done", routed)[0]["via"] == "special"
    events = [r["event"] for r in ledger(qless_client.redis, jid=wrapped)]
    assert events == ["mw-before", "started", "done", "mw-after"]
    row = ledger(qless_client.redis, "done", sandboxed)[0]
    assert row["listed"] == ["scratch.txt"]
    # The sandbox is removed after the job.
    wait_until(lambda: not os.path.exists(row["sandbox"]))
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_quit_finishes_running_job_then_exits_zero(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    names = registered(qless_client, 1)
    slow = q.put("tests.worker.jobs.sleepy", {"seconds": 1.5})
    wait_until(lambda: ledger(qless_client.redis, "started", slow))
    queued = [q.put("tests.worker.jobs.ok", {}, priority=-1) for _ in range(3)]
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert qless_client.jobs[slow].state == "complete"
    assert len(ledger(qless_client.redis, "done", slow)) == 1
    if mode == MODES["serial"]:
        assert [qless_client.jobs[j].state for j in queued] == ["waiting"] * 3
    # Deregistered on the way out.
    left = {w["name"] for w in qless_client.workers.counts}
    assert not left & set(names)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_term_and_int_release_running_job_without_spending_a_retry(
    qless_client, start_worker, mode, signum
):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode, "--term-grace", "0")
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 30}, retries=3, priority=7,
                tags=["keep"])
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    kids = worker.children()
    worker.signal(signum)
    assert worker.wait(timeout=15) == 0
    job = qless_client.jobs[jid]
    assert job.state == "waiting"
    assert job.retries == 3 and job.original_retries == 3
    assert job.priority == 7 and job.tags == ("keep",)
    assert not ledger(qless_client.redis, "done", jid)
    assert not [k for k in kids if alive(k)]
    counts = qless_client.workers.counts
    assert counts == [] or all(w["jobs"] == 0 for w in counts)


def test_usr1_kills_current_job_and_carries_on(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    registered(qless_client, 1)
    stuck = q.put("tests.worker.jobs.sleepy", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", stuck))
    worker.signal(signal.SIGUSR1)
    wait_until(lambda: qless_client.jobs[stuck].state == "failed")
    assert qless_client.jobs[stuck].failure["group"] == "django_qless.JobKilled"
    after = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[after].state == "complete")
    assert worker.proc.poll() is None
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_usr2_pauses_and_dumps_stacks_cont_resumes(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    registered(qless_client, 1)
    time.sleep(0.2)
    worker.signal(signal.SIGUSR2)
    wait_until(lambda: "Current thread" in worker.stderr() or "Thread 0x" in worker.stderr())
    time.sleep(0.3)
    jids = [q.put("tests.worker.jobs.ok", {}) for _ in range(5)]
    time.sleep(1.5)
    assert [qless_client.jobs[j].state for j in jids] == ["waiting"] * 5
    worker.signal(signal.SIGCONT)
    wait_until(lambda: all(qless_client.jobs[j].state == "complete" for j in jids))
    assert "Console" not in worker.stderr()
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_max_jobs_stops_with_exit_zero(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    jids = [q.put("tests.worker.jobs.ok", {}) for _ in range(3)]
    worker = start_worker("q", *mode, "--max-jobs", "3")
    assert worker.wait(timeout=20) == 0
    assert all(qless_client.jobs[j].state == "complete" for j in jids)


def test_per_job_timeout_fails_the_job(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode, "--timeout", "1", "--kill-grace", "1")
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 30})
    wait_until(lambda: qless_client.jobs[jid].state == "failed", timeout=10)
    assert qless_client.jobs[jid].failure["group"] == "django_qless.JobTimeout"
    after = q.put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[after].state == "complete")
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_lock_lost_aborts_the_job_and_it_runs_again(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    jid = q.put("tests.worker.jobs.sleepy", {"seconds": 3})
    first = wait_until(lambda: ledger(qless_client.redis, "started", jid))[0]
    # Someone takes the lock away: the engine sends lock_lost on ql:w:<worker>.
    qless_client.jobs[jid].timeout()
    # The job is stalled at the front of the queue, runs again, and completes once.
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=15)
    runs = ledger(qless_client.redis, "started", jid)
    assert len(runs) == 2 and len(ledger(qless_client.redis, "done", jid)) == 1
    if mode == MODES["forking"]:
        # The child that lost the lock was killed.
        wait_until(lambda: not alive(first["pid"]), timeout=5)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_cancel_interrupts_a_blocking_job(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    jid = q.put("tests.worker.jobs.sleep_long", {"seconds": 30})
    first = wait_until(lambda: ledger(qless_client.redis, "started", jid))[0]
    qless_client.jobs[jid].cancel()
    after = q.put("tests.worker.jobs.ok", {})
    # Serial: the sleep is interrupted; forking: the child is killed. Either way, promptly.
    wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=5)
    assert not ledger(qless_client.redis, "done", jid)
    if mode == MODES["forking"]:
        wait_until(lambda: not alive(first["pid"]), timeout=5)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_result_of_a_job_whose_lock_was_lost_is_not_accepted(qless_client, start_worker, mode):
    q = qless_client.queues["q"]
    worker = start_worker("q", *mode)
    jid = q.put("tests.worker.jobs.lose_lock_once", {})
    wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=10)
    runs = ledger(qless_client.redis, "started", jid)
    assert len(runs) == 2
    whats = [h["what"] for h in qless_client.jobs[jid].history]
    # One accepted completion: the first run's result was refused or never sent.
    assert whats.count("done") == 1 and whats.count("popped") == 2
    if mode == MODES["forking"]:
        wait_until(lambda: not alive(runs[0]["pid"]), timeout=5)  # that child was killed
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
