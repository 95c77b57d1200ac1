"""An abort asked for by another thread and a signal arriving together: neither is lost."""

from __future__ import annotations

import signal

import pytest

from django_qless.core.client import Client
from django_qless.core.exceptions import JobNotFound
from tests.worker.conftest import wait_until
from tests.worker.jobs import ledger

pytestmark = pytest.mark.timeout(60)


def test_quit_arriving_while_an_abort_is_pending_still_stops_the_worker(
    qless_client: Client, start_worker,
) -> None:
    # The job cancels itself (the listener thread asks for an abort), and QUIT arrives
    # before the abort reaches the job. An abort scheduled as an asynchronous exception
    # landed inside QUIT's handler, before it recorded anything: the worker went on idling
    # until its safety re-check (here 300 s).
    worker = start_worker("q", "-n", "0", "--interval", "300", "--reap-interval", "0")
    jid = qless_client.queues["q"].put("tests.worker.jobs.quit_while_abort_comes", {})
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    assert worker.wait(20) == 0
    assert not ledger(qless_client.redis, "done", jid)
    with pytest.raises(JobNotFound):
        qless_client.jobs[jid]  # canceled
    assert f"job {jid} aborted" in worker.stderr()


def test_a_kicked_abort_interrupts_a_blocking_call_after_quit(
    qless_client: Client, start_worker,
) -> None:
    # QUIT first (finish the job), then a cancel: the abort still interrupts the sleep.
    worker = start_worker("q", "-n", "0")
    jid = qless_client.queues["q"].put("tests.worker.jobs.sleep_long", {"seconds": 30})
    wait_until(lambda: ledger(qless_client.redis, "started", jid))
    worker.signal(signal.SIGQUIT)
    qless_client.jobs[jid].cancel()
    assert worker.wait(15) == 0
    assert not ledger(qless_client.redis, "done", jid)
