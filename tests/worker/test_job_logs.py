"""What a worker started without -v logs about jobs: failures, retries, lost leases, timeouts.

Each worker is a real subprocess; its stderr is read, and a handler imported with the jobs
writes every record as JSON, with the job fields `JobContextFilter` adds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.worker.conftest import ROOT, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)

BOTH = pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])


class QuietWorker:
    """A CLI worker without -v whose records also go, as JSON lines, to a file."""

    def __init__(self, url: str, work: Path, args: tuple[str, ...]) -> None:
        self.log_path = work / f"records-{len(list(work.iterdir()))}.jsonl"
        self.err_path = self.log_path.with_suffix(".err")
        env = {**os.environ, "PYTHONPATH": str(ROOT), "QLESS_TEST_LOG": str(self.log_path)}
        argv = [sys.executable, "-m", "django_qless.core.workers", "--url", url,
                "--import", "tests.worker.jobs", "--import", "tests.worker.logged_jobs",
                "--sandbox-root", str(work / "sandboxes"), *args]
        with open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=err,
                                         start_new_session=True)

    def wait(self, timeout: float = 30) -> int:
        """Wait for the worker to exit; return its exit code."""
        return self.proc.wait(timeout)

    def stderr(self) -> str:
        """Return what the worker wrote on stderr."""
        return self.err_path.read_text()

    def records(self) -> list[dict[str, Any]]:
        """Return the records written so far."""
        if not self.log_path.exists():
            return []
        return [json.loads(line) for line in self.log_path.read_text().splitlines()]

    def kill(self) -> None:
        """Kill the worker's whole session."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()


@pytest.fixture
def quiet_worker(redis_url: str, work_dir: Path) -> Iterator[Callable[..., QuietWorker]]:
    """Start workers without -v; each is killed at teardown."""
    started: list[QuietWorker] = []

    def start(*args: str) -> QuietWorker:
        worker = QuietWorker(redis_url, work_dir, args)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.kill()


def _about(records: list[dict[str, Any]], jid: str) -> list[dict[str, Any]]:
    return [r for r in records if r["jid"] == jid]


@BOTH
def test_a_failed_job_is_an_error_with_its_message_and_traceback(
    qless_client: Any, quiet_worker: Any, processes: str
) -> None:
    jid = qless_client.queues["q"].put("tests.worker.jobs.boom", {"n": 7})
    worker = quiet_worker("-n", processes, "--max-jobs", "1", "q")
    assert worker.wait() == 0
    err = worker.stderr()
    line = next(x for x in err.splitlines() if f"job {jid}" in x and "failed" in x)
    assert " ERROR " in line and "builtins.ValueError: boom 7" in line, err
    assert "Traceback (most recent call last):" in err and "ValueError: boom 7" in err
    [record] = [r for r in _about(worker.records(), jid) if r["level"] == "ERROR"]
    assert record["traceback"] is True
    assert record["klass"] == "tests.worker.jobs.boom" and record["queue"] == "q"
    assert record["attempt"] == 1 and record["worker"].rsplit("-", 1)[1].isdigit()


@BOTH
def test_a_job_that_retries_itself_is_a_warning_saying_when_it_runs(
    qless_client: Any, quiet_worker: Any, processes: str
) -> None:
    jid = qless_client.queues["q"].put("tests.worker.logged_jobs.retry_later", {}, retries=3)
    worker = quiet_worker("-n", processes, "--max-jobs", "1", "q")
    assert worker.wait() == 0
    assert qless_client.jobs[jid].state == "scheduled"
    [record] = _about(worker.records(), jid)
    assert record["level"] == "WARNING", record
    assert "try again later; retried, runs again after its back-off (2 retries left)" in \
        record["message"]
    assert record["attempt"] == 1 and record["klass"] == "tests.worker.logged_jobs.retry_later"
    assert " ERROR " not in worker.stderr()


def test_a_job_out_of_retries_says_so(qless_client: Any, quiet_worker: Any) -> None:
    jid = qless_client.queues["q"].put("tests.worker.logged_jobs.retry_later", {}, retries=0)
    worker = quiet_worker("-n", "0", "--max-jobs", "1", "q")
    assert worker.wait() == 0
    assert qless_client.jobs[jid].state == "failed"
    [record] = _about(worker.records(), jid)
    assert record["level"] == "ERROR" and record["attempt"] == 1 and record["traceback"]
    assert "failed, no retries left: builtins.RuntimeError: try again later" in \
        record["message"]


@BOTH
def test_records_logged_inside_a_job_carry_its_jid(
    qless_client: Any, quiet_worker: Any, processes: str
) -> None:
    jid = qless_client.queues["q"].put("tests.worker.logged_jobs.chatty", {})
    worker = quiet_worker("-n", processes, "--max-jobs", "1", "q")
    assert worker.wait() == 0
    [record] = [r for r in worker.records() if r["logger"] == "shop.jobs"]
    assert record["message"] == "inside the job"
    assert (record["jid"], record["queue"], record["klass"]) == (
        jid, "q", "tests.worker.logged_jobs.chatty")
    assert "inside the job" in worker.stderr()
    # Outside a job the filter fills the fields with None, so a format never breaks.
    assert all(r["jid"] is None for r in worker.records() if r["logger"] != "shop.jobs"
               and "job" not in r["message"])


@BOTH
def test_a_time_limit_is_logged_without_verbose(
    qless_client: Any, quiet_worker: Any, processes: str
) -> None:
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleep_long", {"seconds": 30})
    worker = quiet_worker("-n", processes, "--timeout", "1", "--kill-grace", "1",
                          "--max-jobs", "1", "q")
    assert worker.wait() == 0
    assert f"job {jid}" in worker.stderr() and "time limit of 1" in worker.stderr()
    about = [r for r in worker.records() if "time limit" in r["message"]]
    assert about and all(r["jid"] == jid and r["queue"] == "q" for r in about), about
    assert {r["level"] for r in about} <= {"WARNING", "ERROR"}


@BOTH
def test_a_job_canceled_while_it_runs_is_a_warning_naming_it(
    qless_client: Any, quiet_worker: Any, processes: str
) -> None:
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleep_long", {"seconds": 30})
    worker = quiet_worker("-n", processes, "q")
    wait_until(lambda: ledger(qless_client.redis, "started", jid), timeout=15)
    qless_client.jobs[jid].cancel()
    wait_until(lambda: [r for r in _about(worker.records(), jid) if "canceled" in r["message"]],
               timeout=15)
    worker.proc.send_signal(signal.SIGQUIT)
    assert worker.wait() == 0
    [record] = [r for r in _about(worker.records(), jid) if "canceled" in r["message"]]
    assert record["level"] == "WARNING" and record["queue"] == "q", record
    assert record["klass"] == "tests.worker.jobs.sleep_long"


def test_a_lost_lease_is_a_warning_naming_the_job(qless_client: Any, quiet_worker: Any) -> None:
    jid = qless_client.queues["q"].put("tests.worker.refused_jobs.stolen", {})
    worker = quiet_worker("-n", "0", "--max-jobs", "1", "--import", "tests.worker.refused_jobs",
                          "q")
    assert worker.wait() == 0
    [record] = [r for r in _about(worker.records(), jid) if "lease" in r["message"]]
    assert record["level"] == "WARNING"
    assert "not completed, this worker lost its lease" in record["message"]
    assert record["klass"] == "tests.worker.refused_jobs.stolen"
