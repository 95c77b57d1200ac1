"""A completion refused for good (data too large, not JSON) fails the job at once.

Treated like a lost lock, such a job would be dropped by its worker, wait for its lease to
expire and run again until its retries ran out. Checked on every way a worker completes:
alone (nothing more to take), together with the next reserve, and sent ahead while the next
held job runs.
"""

from __future__ import annotations

import signal
from typing import Any

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)

GROUP = "django_qless.CompleteRefused"
BAD = {
    "tests.worker.refused_jobs.grow": "over the limit of 1,048,576 bytes (1 MiB)",
    "tests.worker.refused_jobs.setty": "data['seen'] is not JSON-serialisable: set",
    "tests.worker.refused_jobs.garbled": 'Arg "data" not JSON',
}
IMPORT = ("--import", "tests.worker.refused_jobs")


def settled(qless_client: Client, jids: list[str]) -> bool:
    return all(qless_client.jobs[j].state in ("complete", "failed") for j in jids)


def assert_failed_once(qless_client: Client, jid: str, reason: str, data: dict[str, Any]) -> None:
    """The job failed after one run, naming the reason, with the data it was put with."""
    job = qless_client.jobs[jid]
    assert job.state == "failed"
    assert job.failure is not None
    assert job.failure["group"] == GROUP
    assert reason in job.failure["message"]
    assert job.klass_name in job.failure["message"]
    assert job.data == data
    assert [entry["what"] for entry in job.history].count("popped") == 1
    assert len(ledger(qless_client.redis, "started", jid)) == 1


@pytest.mark.parametrize("klass", sorted(BAD))
def test_refused_completion_alone_fails_the_job_at_once(
    qless_client: Client, start_worker: Any, klass: str
) -> None:
    """The worker's last job (complete without reserve): failed after one run."""
    jid = qless_client.queues["q"].put(klass, {"n": 1}, retries=5)
    worker = start_worker("q", "-n", "0", "--max-jobs", "1", *IMPORT)
    assert worker.wait() == 0
    assert_failed_once(qless_client, jid, BAD[klass], {"n": 1})


@pytest.mark.parametrize("mode", [["-n", "0"], ["-n", "1"]])
def test_refused_completion_with_the_next_reserve_fails_the_job_at_once(
    qless_client: Client, start_worker: Any, mode: list[str]
) -> None:
    """Complete-and-reserve (no job held ahead): the bad jobs fail, the others complete."""
    q = qless_client.queues["q"]
    jids = {k: q.put(k, {"k": k}, retries=5) for k in sorted(BAD)}
    oks = [q.put("tests.worker.jobs.ok", {}) for _ in range(3)]
    worker = start_worker("q", *mode, "--no-prefetch", *IMPORT)
    wait_until(lambda: settled(qless_client, [*jids.values(), *oks]), timeout=20)
    for klass, jid in jids.items():
        assert_failed_once(qless_client, jid, BAD[klass], {"k": klass})
    assert [qless_client.jobs[j].state for j in oks] == ["complete"] * 3
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_refused_completion_sent_ahead_fails_the_job_at_once(
    qless_client: Client, start_worker: Any
) -> None:
    """Short jobs flowing (completions sent ahead while a held job runs): same outcome."""
    q = qless_client.queues["q"]
    jids: dict[str, str] = {}
    briefs = [q.put("tests.worker.jobs.brief", {}) for _ in range(10)]
    for klass in sorted(BAD):
        jids[klass] = q.put(klass, {"k": klass}, retries=5)
        briefs += [q.put("tests.worker.jobs.brief", {}) for _ in range(10)]
    worker = start_worker("q", "-n", "0", *IMPORT)
    wait_until(lambda: settled(qless_client, [*jids.values(), *briefs]), timeout=20)
    for klass, jid in jids.items():
        assert_failed_once(qless_client, jid, BAD[klass], {"k": klass})
    assert {qless_client.jobs[j].state for j in briefs} == {"complete"}
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


def test_a_job_that_raises_with_unstorable_data_is_still_failed(
    qless_client: Client, start_worker: Any
) -> None:
    """Failing a job sends its data too: changes that cannot be stored are dropped, not the
    failure."""
    jid = qless_client.queues["q"].put("tests.worker.refused_jobs.setty_then_raise", {"n": 2})
    worker = start_worker("q", "-n", "0", "--max-jobs", "1", *IMPORT)
    assert worker.wait() == 0
    job = qless_client.jobs[jid]
    assert job.state == "failed"
    assert job.failure is not None
    assert job.failure["group"] == "builtins.ValueError"
    assert "ValueError: gave up" in job.failure["message"]
    assert "changes to its data were not saved" in job.failure["message"]
    assert job.data == {"n": 2}
    assert len(ledger(qless_client.redis, "started", jid)) == 1


def test_a_lost_lock_is_still_treated_as_lost(qless_client: Client, start_worker: Any) -> None:
    """A completion refused because another worker holds the job is not made a failure."""
    jid = qless_client.queues["q"].put("tests.worker.refused_jobs.stolen", {})
    worker = start_worker("q", "-n", "0", "--max-jobs", "1", *IMPORT)
    assert worker.wait() == 0
    job = qless_client.jobs[jid]
    assert (job.state, job.worker_name, job.failure) == ("running", "someone-else", None)
    assert "not completed, this worker lost its lease" in worker.stderr()


def test_data_that_cannot_be_stored_does_not_cost_a_long_job_its_lease(
    qless_client: Client, start_worker: Any
) -> None:
    """Heartbeats renew the lock without the changes they cannot send; the job runs once."""
    qless_client.config["heartbeat"] = 1
    qless_client.config["grace-period"] = 0
    jid = qless_client.queues["q"].put("tests.worker.refused_jobs.setty_long", {"seconds": 4})
    # A second child and the supervisor's reaper would take the job over once its lease ran out.
    worker = start_worker("q", "-n", "2", *IMPORT)
    wait_until(lambda: settled(qless_client, [jid]), timeout=30)
    worker.signal(signal.SIGQUIT)
    assert worker.wait(timeout=30) == 0
    assert_failed_once(qless_client, jid, "data['seen'] is not JSON-serialisable: set",
                       {"seconds": 4})
