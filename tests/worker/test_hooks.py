"""Hooks in the forking worker (the Django seam) and the respawn back-off."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from tests.worker.conftest import ROOT, wait_until

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def hooked(redis_url):
    procs: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.worker.hooked_worker", redis_url, *extra],
            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=5)


def events(r) -> list[tuple[str, int]]:
    return [(e.rsplit(" ", 1)[0], int(e.rsplit(" ", 1)[1])) for e in r.lrange("test:hooks", 0, -1)]


def test_before_fork_runs_in_the_supervisor_before_every_fork(qless_client, r, hooked):
    proc = hooked()
    wait_until(lambda: sum(1 for e, _ in events(r) if e == "on_worker_start") == 2)
    jid = qless_client.queues["q"].put("tests.worker.jobs.suicide", {})
    wait_until(lambda: sum(1 for e, _ in events(r) if e == "on_worker_start") == 3, timeout=10)
    got = events(r)
    sup = proc.pid
    assert all(pid == sup for e, pid in got if e == "before_fork" or e.startswith("after_fork_p"))
    child_pids = {pid for e, pid in got if e == "after_fork_child"}
    assert sup not in child_pids and len(child_pids) >= 3
    # Every fork is preceded by before_fork in the supervisor.
    forks = [e for e, _ in got if e == "before_fork" or e.startswith("after_fork_parent")]
    assert forks[:2] == ["before_fork", forks[1]] and forks[1].startswith("after_fork_parent")
    assert any(e == f"around_job:{jid}" for e, _ in got)
    proc.send_signal(signal.SIGQUIT)
    assert proc.wait(timeout=15) == 0
    assert sum(1 for e, _ in events(r) if e == "on_worker_stop") >= 2


def test_children_dying_in_a_loop_are_respawned_with_back_off(r, hooked):
    proc = hooked("crash")
    time.sleep(3.0)
    forks = sum(1 for e, _ in events(r) if e == "before_fork")
    # Without back-off two slots would fork hundreds of times in 3 s.
    assert 4 <= forks <= 20
    assert proc.poll() is None
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=15) == 0
