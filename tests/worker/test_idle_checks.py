"""Idle children waiting for the leader token check their supervisor rarely, yet leave
promptly when it dies: the kernel's parent-death signal (PDEATHSIG) tells them.

Each check wakes a child; with 100 idle children, one check a second each cost the host
~15 ms of CPU a second. With PDEATHSIG armed the getppid() check runs every 10 s; without it
(tests.worker.no_pdeathsig, as where Linux's PDEATHSIG is missing) every second, which
test_idle's supervisor-kill test covers.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, alive, wait_until
from tests.worker.test_idle import CHILDREN, idle_worker

pytestmark = pytest.mark.timeout(90)


def wakeups(pid: int) -> int:
    """Return the voluntary context switches of all threads of `pid` so far."""
    total = 0
    for status in Path(f"/proc/{pid}/task").glob("*/status"):
        for line in status.read_text().splitlines():
            if line.startswith("voluntary_ctxt_switches:"):
                total += int(line.split()[1])
    return total


def quiet_children(kids: list[int], seconds: float) -> list[int]:
    """Return how often each child woke up over `seconds` (after its threads settled)."""
    before = [wakeups(k) for k in kids]
    time.sleep(seconds)
    return [wakeups(k) - b for k, b in zip(kids, before, strict=True)]


def test_children_waiting_for_the_token_do_not_wake_every_second(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client)
    kids = worker.wait_children(CHILDREN)
    time.sleep(1.0)
    woke = quiet_children(kids, 5.0)
    # The leader waits on its subscriptions in one-second slices; the others, waiting for
    # the token, would wake 5 times in 5 s with one-second checks.
    assert sum(w < 3 for w in woke) >= CHILDREN - 1, woke
    worker.quit()


def test_without_the_parent_death_signal_they_check_every_second(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client, "--import", "tests.worker.no_pdeathsig")
    kids = worker.wait_children(CHILDREN)
    time.sleep(1.0)
    woke = quiet_children(kids, 5.0)
    assert all(w >= 4 for w in woke), woke  # the getppid() check is the only way to know
    worker.quit()


def test_token_waiters_leave_promptly_when_the_supervisor_is_killed(
    qless_client: Client, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = idle_worker(start_worker, qless_client)
    kids = worker.wait_children(CHILDREN)
    time.sleep(1.5)  # every non-leader is inside a 10 s wait for the token
    worker.signal(signal.SIGKILL)
    worker.proc.wait(timeout=5)
    t0 = time.monotonic()
    wait_until(lambda: not any(alive(k) for k in kids), timeout=8)
    assert time.monotonic() - t0 < 8  # before their next getppid() check: the signal did it
