"""Any number of TERMs, in any timing, ends the worker with a documented exit code."""

from __future__ import annotations

import signal
import time

import pytest

from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(120)

# Documented codes of a stop by TERM: 0 (every job released or finished), 3 (forced).
STOPPED = {0, 3}


@pytest.mark.parametrize("grace", ["0", "10"])
def test_a_second_term_soon_after_the_first_never_kills_the_supervisor(
    qless_client, start_worker, grace
):
    """Two TERMs 5-60 ms apart: the supervisor exits with its own code, never by the signal
    (it kept its handlers until it exited)."""
    codes = {}
    for delay in (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06):
        worker = start_worker("q", "-n", "1", "--term-grace", grace)
        worker.wait_children(1)
        wait_until(lambda: qless_client.workers.counts, timeout=10)  # the child is idle
        worker.signal(signal.SIGTERM)
        time.sleep(delay)
        try:
            worker.signal(signal.SIGTERM)
        except ProcessLookupError:
            pass  # gone already
        codes[delay] = worker.wait(timeout=20)
    assert set(codes.values()) <= STOPPED, codes
