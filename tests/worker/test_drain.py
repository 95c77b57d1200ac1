"""TERM lets running jobs finish within --term-grace, then gives them back; serial and forking.

Real worker subprocesses, real signals, real Redis; process titles read from /proc.
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from django_qless.core.client import Client
from django_qless.core.workers.shutdown import SignalState
from tests.worker.conftest import alive, cmdline, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(90)

MODES = {"serial": ["-n", "0"], "forking": ["-n", "1"]}


@pytest.fixture(params=sorted(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


def start_job(qless_client: Client, seconds: float) -> tuple[str, int]:
    """Put a sleepy job; return its jid and the pid of the process running it, once started."""
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": seconds},
                                       retries=3)
    row = wait_until(lambda: ledger(qless_client.redis, "started", jid), timeout=15)[0]
    return jid, row["pid"]


def title_says(pid: int, word: str) -> str:
    """Wait until the process title of `pid` holds `word`; return the title."""
    return wait_until(lambda: (lambda t: t if word in t else "")(cmdline(pid)), timeout=5)


def test_a_job_finishes_within_the_grace_and_the_titles_say_draining(
    qless_client, start_worker, mode
):
    worker = start_worker("q", *mode, "--term-grace", "20")
    jid, runner = start_job(qless_client, 3)
    worker.signal(signal.SIGTERM)
    assert "draining" in title_says(runner, "draining")
    if runner != worker.pid:
        assert "s left)" in title_says(worker.pid, "draining")  # the supervisor knows the time
    assert qless_client.jobs[jid].state == "running"
    assert worker.wait(timeout=20) == 0
    assert qless_client.jobs[jid].state == "complete"
    assert len(ledger(qless_client.redis, "done", jid)) == 1


@pytest.mark.parametrize("grace", [0, 1])
def test_a_job_still_running_after_the_grace_is_given_back(
    qless_client, start_worker, mode, grace
):
    worker = start_worker("q", *mode, "--term-grace", str(grace))
    jid, _ = start_job(qless_client, 30)
    t0 = time.monotonic()
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    took = time.monotonic() - t0
    job = qless_client.jobs[jid]
    assert job.state == "waiting" and job.retries == 3  # released: no retry spent
    assert not ledger(qless_client.redis, "done", jid)
    if grace:
        assert took >= grace * 0.9  # (it ran on for the grace)
    assert took < grace + 8


def test_a_second_term_during_the_grace_gives_the_job_back_now(qless_client, start_worker, mode):
    worker = start_worker("q", *mode, "--term-grace", "60")
    jid, runner = start_job(qless_client, 30)
    worker.signal(signal.SIGTERM)
    title_says(runner, "draining")
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=20) == 0
    assert qless_client.jobs[jid].state == "waiting"
    assert not ledger(qless_client.redis, "done", jid)


def test_an_idle_worker_exits_at_once_on_term(qless_client, start_worker, mode):
    worker = start_worker("q", *mode)  # the default grace
    wait_until(lambda: qless_client.workers.counts, timeout=10)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=5) == 0


def test_a_third_term_kills_the_children_exit_3(qless_client, start_worker):
    """Drain, give back, force: a child that cannot react is killed by the third TERM."""
    worker = start_worker("q", "-n", "1", "--term-grace", "60", "--shutdown-grace", "60")
    jid, child = start_job(qless_client, 30)
    os.kill(child, signal.SIGSTOP)  # it can neither finish nor give back now
    worker.signal(signal.SIGTERM)
    title_says(worker.pid, "draining")
    worker.signal(signal.SIGTERM)
    title_says(worker.pid, "stopping")
    assert alive(child)
    worker.signal(signal.SIGTERM)
    assert worker.wait(timeout=10) == 3
    assert not alive(child)
    assert qless_client.jobs[jid].state == "waiting"


def test_the_signal_state_says_whether_it_drains():
    """What a dashboard reads: Quiet (graceful) drains, Stop gives back (no grace)."""
    quiet = SignalState()
    assert not quiet.draining and not quiet.stopping
    quiet.request_stop(graceful=True)
    assert quiet.draining and quiet.stopping and quiet.drain_left() is None
    quiet.request_stop(graceful=False)
    assert not quiet.draining and quiet.stopping and quiet.stop_requests == 1
    stop = SignalState()
    stop.request_stop(graceful=False)
    assert not stop.draining and stop.stopping
    for state in (quiet, stop):
        state.wake_pipe.close()


@pytest.mark.parametrize("seconds, state", [(2, "complete"), (30, "waiting")])
def test_a_term_to_the_whole_process_group_drains_the_children_too(
    qless_client, start_worker, seconds, state
):
    """systemd's default KillMode=control-group, foreman or Heroku signal every process."""
    worker = start_worker("q", "-n", "2", "--term-grace", "4")
    kids = worker.wait_children(2)
    jid, child = start_job(qless_client, seconds)
    os.killpg(worker.pid, signal.SIGTERM)
    title_says(child, "draining")
    assert worker.wait(timeout=20) == 0
    assert not any(alive(k) for k in kids)
    job = qless_client.jobs[jid]
    assert job.state == state and job.retries == 3
    assert len(ledger(qless_client.redis, "done", jid)) == (state == "complete")


def test_hup_gives_the_running_job_back_at_once(qless_client, start_worker, mode):
    worker = start_worker("q", *mode, "--term-grace", "60")
    jid, _ = start_job(qless_client, 30)
    worker.signal(signal.SIGHUP)
    assert worker.wait(timeout=10) == 0
    job = qless_client.jobs[jid]
    assert job.state == "waiting" and job.retries == 3
