"""Any number of TERMs, in any timing, ends the worker with a documented exit code."""

from __future__ import annotations

import signal
import time

import pytest

from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(180)

# Documented codes of a stop by TERM: 0 (every job finished or released), 3 (forced).
STOPPED = {0, 3}


@pytest.mark.parametrize("mode, grace, terms", [
    ("1", "0", 2), ("1", "10", 2), ("1", "10", 3), ("0", "10", 3),
])
def test_terms_soon_after_the_first_never_end_the_worker_by_the_signal(
    qless_client, start_worker, mode, grace, terms
):
    """TERMs 5-60 ms apart: the worker exits with its own code, never by the signal (it
    ignores them from the moment it has stopped its children until it has exited)."""
    codes = {}
    for delay in (0.005, 0.01, 0.02, 0.03, 0.04, 0.05, 0.06):
        worker = start_worker("q", "-n", mode, "--term-grace", grace)
        if mode != "0":
            worker.wait_children(1)
        wait_until(lambda: qless_client.workers.counts, timeout=10)  # ready, idle
        for n in range(terms):
            if n:
                time.sleep(delay)
            try:
                worker.signal(signal.SIGTERM)
            except ProcessLookupError:
                break  # gone already
        codes[delay] = worker.wait(timeout=20)
    assert set(codes.values()) <= STOPPED, codes
