"""Time limits per job kind: a kind's `timeout` and `soft_timeout` over the worker's
--timeout, in the serial worker and the forking one (real subprocesses, real signals)."""

from __future__ import annotations

import math
import signal
import threading
from datetime import timedelta

import pytest

from django_qless.core.exceptions import InvalidArgument, SoftTimeLimitExceeded
from django_qless.core.integrations.jobinfo import outcome_of
from django_qless.core.registry import Registry, TimeLimits
from django_qless.core.workers import SerialWorker, WorkerConfig
from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(90)

MODULE = "tests.worker.limited_jobs"
TIMEOUT = "django_qless.JobTimeout"


@pytest.fixture(params=["0", "1"], ids=["serial", "forking"])
def processes(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def ran_for(job) -> float:
    """Return the seconds between the job's pop and its failure (from its history)."""
    times = {entry["what"]: entry["when"] for entry in job.history}
    return float(times["failed"]) - float(times["popped"])


def test_a_kind_limit_overrides_the_worker_timeout(qless_client, start_worker, processes):
    q = qless_client.queues["q"]
    jid = q.put(f"{MODULE}.hard_one", {})
    worker = start_worker("q", "-n", processes, "--timeout", "60", "--kill-grace", "1",
                          jobs_module=MODULE)
    wait_until(lambda: qless_client.jobs[jid].state == "failed", timeout=20)
    job = qless_client.jobs[jid]
    assert job.failure["group"] == TIMEOUT
    assert "time limit of 1s" in job.failure["message"]
    assert 0.9 <= ran_for(job) < 10  # its own second, not the worker's minute
    assert not ledger(qless_client.redis, "done", jid)
    after = q.put(f"{MODULE}.quick", {})
    wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=20)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0
    assert f"job {jid} timed out: still running after its limit of 1s" in worker.stderr()


def test_a_job_that_catches_its_soft_limit_completes(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put(f"{MODULE}.tidy", {})
    worker = start_worker("q", "-n", processes, "--timeout", "60", "--max-jobs", "1",
                          jobs_module=MODULE)
    assert worker.wait(timeout=30) == 0
    job = qless_client.jobs[jid]
    assert job.state == "complete" and job.data == {"cleaned": True}
    soft = ledger(qless_client.redis, "soft", jid)
    assert len(soft) == 1 and "soft time limit of 1s" in soft[0]["message"]
    assert "soft time limit of 1s reached" in worker.stderr()


def test_soft_then_hard_limit(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put(f"{MODULE}.stubborn", {})
    worker = start_worker("q", "-n", processes, "--timeout", "60", "--kill-grace", "1",
                          jobs_module=MODULE)
    wait_until(lambda: qless_client.jobs[jid].state == "failed", timeout=20)
    job = qless_client.jobs[jid]
    assert job.failure["group"] == TIMEOUT
    assert "time limit of 3s" in job.failure["message"]
    assert 2.9 <= ran_for(job) < 15
    assert len(ledger(qless_client.redis, "soft", jid)) == 1
    assert not ledger(qless_client.redis, "done", jid)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_a_soft_limit_let_out_fails_the_job_as_timed_out(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put(f"{MODULE}.careless", {})
    worker = start_worker("q", "-n", processes, "--max-jobs", "1", jobs_module=MODULE)
    assert worker.wait(timeout=30) == 0
    failure = qless_client.jobs[jid].failure
    assert failure["group"] == TIMEOUT
    assert "SoftTimeLimitExceeded" in failure["message"]


def test_a_kind_without_a_limit_uses_the_worker_timeout(qless_client, start_worker, processes):
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleepy", {"seconds": 30})
    worker = start_worker("q", "-n", processes, "--timeout", "1", "--kill-grace", "1")
    wait_until(lambda: qless_client.jobs[jid].state == "failed", timeout=20)
    job = qless_client.jobs[jid]
    assert job.failure["group"] == TIMEOUT
    assert "time limit of 1s" in job.failure["message"]
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize(
    ("limits", "message"),
    [
        ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        ({"timeout": -5}, "timeout must be a positive number of seconds, got -5"),
        ({"timeout": math.nan}, "timeout must be a positive number of seconds, got nan"),
        ({"soft_timeout": math.inf}, "soft_timeout must be a positive number of seconds"),
        ({"timeout": "30"}, "timeout must be a number of seconds or a timedelta, got '30'"),
        ({"timeout": True}, "timeout must be a number of seconds or a timedelta, got True"),
        ({"soft_timeout": timedelta(0)}, "soft_timeout must be a positive number of seconds"),
        ({"timeout": 10, "soft_timeout": 10},
         r"soft_timeout \(10s\) must be shorter than timeout \(10s\)"),
        ({"timeout": 5, "soft_timeout": 9},
         r"soft_timeout \(9s\) must be shorter than timeout \(5s\)"),
    ],
)
def test_bad_limits_are_refused_at_registration(limits, message):
    registry = Registry()
    with pytest.raises(InvalidArgument, match=message):
        registry.register("limited", lambda job: None, **limits)
    with pytest.raises(InvalidArgument, match=message):
        registry.job("limited", **limits)
    assert "limited" not in registry


def test_a_kind_keeps_its_limits_in_the_registry():
    registry = Registry()
    registry.register("both", lambda job: None, timeout=timedelta(minutes=5), soft_timeout=280)
    registry.register("soft", lambda job: None, soft_timeout=2.5)
    registry.register("plain", lambda job: None)
    assert registry.resolve("both").limits == TimeLimits(300.0, 280.0)
    # The worker's --timeout fills in a missing hard limit, never one the kind set.
    worker = TimeLimits(60.0)
    assert registry.resolve("both").limits.over(worker) == TimeLimits(300.0, 280.0)
    assert registry.resolve("soft").limits.over(worker) == TimeLimits(60.0, 2.5)
    assert registry.resolve("plain").limits.over(worker) == worker
    assert registry.resolve("plain").limits.over(TimeLimits()) == TimeLimits()
    assert issubclass(SoftTimeLimitExceeded, Exception)


def test_an_embedded_worker_without_signal_handlers_raises_the_soft_limit(
    redis_url, qless_client
):
    registry = Registry()
    seen: list[str] = []

    def tidy(job):
        try:
            while True:
                threading.Event().wait(0.01)
        except SoftTimeLimitExceeded as exc:
            seen.append(str(exc))

    registry.register("tidy", tidy, soft_timeout=0.5)
    config = WorkerConfig(url=redis_url, queues=("q",), processes=0, registry=registry,
                          name="embedded", interval=0.5, timeout=60)
    worker = SerialWorker(config, install_signals=False)
    jid = qless_client.queues["q"].put("tidy", {})
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    thread.start()
    try:
        wait_until(lambda: qless_client.jobs[jid].state == "complete", timeout=20)
    finally:
        worker.request_stop()
        thread.join(10)
    assert len(seen) == 1  # (raised as an asynchronous exception: a class, no message)


def test_a_soft_limit_let_out_is_reported_as_timed_out(qless_client):
    qless_client.queues["q"].put("tests.worker.jobs.noop", {})
    job = qless_client.queues["q"].pop()
    assert outcome_of(job, SoftTimeLimitExceeded("soft")) == "timed_out"
    assert outcome_of(job, ValueError("bad")) == "failed"
