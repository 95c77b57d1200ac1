"""The health file and its probe: real worker subprocesses, real signals, the probe as an
orchestrator runs it (`python -m django_qless.core.probe`)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from django_qless.core.probe import PERIOD
from tests.helpers import ROOT, wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(90)

SLEEPY = "tests.worker.jobs.sleepy"


def probe(path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run the probe as an exec probe would."""
    return subprocess.run([sys.executable, "-m", "django_qless.core.probe", str(path), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=30, check=False)


def record(path: Path) -> dict[str, Any] | None:
    """Return the health file's record (None: none yet)."""
    try:
        return json.loads(path.read_text())  # type: ignore[no-any-return]
    except (FileNotFoundError, ValueError):
        return None


def state(path: Path) -> str | None:
    found = record(path)
    return None if found is None else found["state"]


def write(path: Path, state: str, age: float) -> None:
    path.write_text(json.dumps({"state": state, "time": time.time() - age, "pid": 1,
                                "worker": "w-1"}))


def test_the_probe_passes_a_fresh_ready_file(tmp_path: Path) -> None:
    path = tmp_path / "health"
    write(path, "ready", 1)
    for args in ([], ["--ready"]):
        result = probe(path, "--max-age", "30", *args)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("worker w-1 (pid 1) is ready"), result.stdout


def test_liveness_holds_while_draining_and_readiness_fails(tmp_path: Path) -> None:
    path = tmp_path / "health"
    write(path, "draining", 1)
    assert probe(path, "--max-age", "30").returncode == 0
    result = probe(path, "--max-age", "30", "--ready")
    assert result.returncode == 1
    assert result.stderr.strip() == "worker w-1 (pid 1) is alive but not ready: draining"


@pytest.mark.parametrize("content, message", [
    (None, "no health file at"),
    ("{not json", "cannot read the health file"),
    ('{"state": "ready"}', "cannot read the health file"),
], ids=["missing", "garbage", "no-time"])
def test_the_probe_fails_without_a_readable_file(tmp_path: Path, content: str | None,
                                                 message: str) -> None:
    path = tmp_path / "health"
    if content is not None:
        path.write_text(content)
    result = probe(path)
    assert result.returncode == 1 and result.stderr.startswith(message), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_a_stale_file_fails_liveness(tmp_path: Path) -> None:
    path = tmp_path / "health"
    write(path, "ready", 45)
    result = probe(path, "--max-age", "30")
    assert result.returncode == 1
    assert "is stale: last heard 45s ago (ready), more than 30s" in result.stderr


def test_the_probe_refuses_a_max_age_of_zero(tmp_path: Path) -> None:
    result = probe(tmp_path / "health", "--max-age", "0")
    assert result.returncode == 2 and "argument --max-age: must be > 0" in result.stderr


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_the_file_stays_fresh_idle_and_while_a_long_job_runs(
    qless_client: Any, start_worker: Any, work_dir: Path, processes: str
) -> None:
    path = work_dir / "health"
    worker = start_worker("-n", processes, "--health-file", str(path), "q")
    wait_until(lambda: state(path) == "ready", timeout=15)
    assert probe(path, "--max-age", "30", "--ready").returncode == 0
    first = record(path)
    assert first is not None and first["pid"] == worker.pid
    # Idle: rewritten every PERIOD seconds without any job.
    wait_until(lambda: (record(path) or first)["time"] > first["time"], timeout=PERIOD + 5)
    # Busy (every child running a job longer than PERIOD): rewritten all the same.
    jid = qless_client.queues["q"].put(SLEEPY, {"seconds": PERIOD + 4})
    wait_until(lambda: ledger(qless_client.redis, "started", jid), timeout=15)
    busy = record(path)
    assert busy is not None
    wait_until(lambda: (record(path) or busy)["time"] > busy["time"], timeout=PERIOD + 3)
    assert not ledger(qless_client.redis, "done", jid)  # (still running)
    assert probe(path, "--max-age", str(PERIOD + 1), "--ready").returncode == 0
    worker.quit()
    assert not path.exists()  # a worker that left has no health file


@pytest.mark.parametrize("processes, signum", [("0", signal.SIGQUIT), ("1", signal.SIGQUIT),
                                               ("0", signal.SIGTERM), ("1", signal.SIGTERM)],
                         ids=["serial-quit", "forking-quit", "serial-term", "forking-term"])
def test_draining_fails_readiness_while_liveness_holds(
    qless_client: Any, start_worker: Any, work_dir: Path, processes: str, signum: int
) -> None:
    path = work_dir / "health"
    worker = start_worker("-n", processes, "--health-file", str(path), "--term-grace", "30", "q")
    wait_until(lambda: state(path) == "ready", timeout=15)
    # The job outlasts the probes below even on a loaded machine (each probe is a new Python).
    jid = qless_client.queues["q"].put(SLEEPY, {"seconds": 8})
    wait_until(lambda: ledger(qless_client.redis, "started", jid), timeout=15)
    worker.signal(signum)  # finish the running job, take no new one
    wait_until(lambda: state(path) == "draining", timeout=5)
    assert probe(path, "--max-age", "30").returncode == 0
    not_ready = probe(path, "--max-age", "30", "--ready")
    assert not_ready.returncode == 1 and "not ready: draining" in not_ready.stderr
    assert worker.wait() == 0
    assert qless_client.jobs[jid].state == "complete"


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_a_paused_worker_is_alive_but_not_ready(start_worker: Any, work_dir: Path,
                                                processes: str) -> None:
    path = work_dir / "health"
    worker = start_worker("-n", processes, "--health-file", str(path), "q")
    wait_until(lambda: state(path) == "ready", timeout=15)
    worker.signal(signal.SIGUSR2)
    wait_until(lambda: state(path) == "paused", timeout=5)
    assert probe(path, "--max-age", "30").returncode == 0
    assert probe(path, "--max-age", "30", "--ready").returncode == 1
    worker.signal(signal.SIGCONT)
    wait_until(lambda: state(path) == "ready", timeout=5)
    worker.quit()


def test_the_worker_says_starting_while_it_waits_for_redis(work_dir: Path) -> None:
    from tests.helpers import WorkerProcess, free_port

    path = work_dir / "health"
    worker = WorkerProcess(f"redis://127.0.0.1:{free_port()}/0",
                           ["--start-timeout", "20", "--health-file", str(path), "q"], work_dir)
    try:
        wait_until(lambda: state(path) == "starting", timeout=15)
        assert probe(path, "--max-age", "30").returncode == 0
        assert probe(path, "--max-age", "30", "--ready").returncode == 1
    finally:
        worker.kill_all()


def test_a_health_file_in_a_missing_directory_is_refused_at_start(work_dir: Path) -> None:
    missing = work_dir / "nope" / "health"
    result = subprocess.run(
        [sys.executable, "-m", "django_qless.core.workers", "--health-file", str(missing), "q"],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"qless-worker: error: argument --health-file: cannot write in {str(missing.parent)!r}")
