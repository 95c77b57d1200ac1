"""A job canceled after its worker popped it but before it started (the pop's reply in
flight, the job held ahead, or its start not reported yet) is still taken away when it
starts: the cancel event named a job not running yet, and the worker remembers it."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
import redis

from django_qless.core.client import Client
from tests.worker.conftest import WorkerProcess, alive, wait_until
from tests.worker.jobs import ledger
from tests.worker.test_idle_supervisor import supervisor_listens

pytestmark = pytest.mark.timeout(120)


def canceled_late(qless_client: Client) -> str:
    """Put a 60 s job that tests/worker/late_start.py cancels between its pop and its start
    (which comes 0.3 s later): the worker, listening all along, hears the cancel first."""
    return qless_client.queues["q"].put("tests.worker.jobs.sleep_long",
                                        {"seconds": 60, "late": True})


def then_works(qless_client: Client, worker: WorkerProcess) -> None:
    after = qless_client.queues["q"].put("tests.worker.jobs.ok", {})
    wait_until(lambda: qless_client.jobs[after].state == "complete", timeout=15)
    worker.signal(signal.SIGQUIT)
    assert worker.wait() == 0


@pytest.mark.parametrize("children", [1, 2])
def test_forking_kills_a_child_starting_a_job_canceled_before_its_start_report(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
    children: int,
) -> None:
    worker = start_worker("q", "-n", str(children), "--import", "tests.worker.late_start")
    worker.wait_children(children)
    wait_until(lambda: supervisor_listens(r), timeout=15)
    late = canceled_late(qless_client)
    popped = wait_until(lambda: ledger(r, "popped", late), timeout=10)[0]
    # Its heartbeat would notice only a third of a lease (20 s) later.
    wait_until(lambda: not alive(popped["pid"]), timeout=5)
    assert not ledger(r, "done", late)
    then_works(qless_client, worker)


def test_serial_does_not_run_a_job_canceled_before_it_started(
    qless_client: Client, r: redis.Redis, start_worker: Callable[..., WorkerProcess],
) -> None:
    worker = start_worker("q", "-n", "0", "--import", "tests.worker.late_start")
    wait_until(lambda: r.pubsub_channels("ql:w:*"), timeout=15)
    late = canceled_late(qless_client)
    wait_until(lambda: ledger(r, "popped", late), timeout=10)
    # Not started at all: without the check it would run until its heartbeat (20 s).
    then_works(qless_client, worker)
    assert not ledger(r, "started", late)
