"""`--max-jobs` is a hard bound for the whole worker; `--max-duration` stops on time.

Jobs are counted from Redis: a job the worker popped has a `popped` entry in its history
(also one it held ahead and gave back), so "no job popped beyond the bound" is checked too.
"""

from __future__ import annotations

import time

import pytest

from django_qless.core.client import Client
from tests.helpers import wait_until

pytestmark = pytest.mark.timeout(60)

NOOP = "tests.worker.jobs.noop"
BRIEF = "tests.worker.jobs.brief"


def popped_and_done(qless_client: Client, jids: list[str]) -> tuple[int, int]:
    """Count the jobs popped at least once, and the completed ones."""
    popped = done = 0
    for job in qless_client.jobs.get_many(*jids):
        whats = [h["what"] for h in job.history]
        popped += "popped" in whats
        done += job.state == "complete"
    return popped, done


@pytest.mark.parametrize(
    "args, limit",
    [
        (["-n", "1"], 4),
        (["-n", "2"], 5),
        (["-n", "2", "--child-max-jobs", "2"], 5),
        (["-n", "0"], 4),
    ],
    ids=["forking-1", "forking-2", "forking-2-recycled", "serial"],
)
@pytest.mark.parametrize("klass", [NOOP, BRIEF], ids=["noop", "brief"])
def test_max_jobs_bounds_the_whole_worker(qless_client, start_worker, args, limit, klass):
    jids = qless_client.queues["q"].put_many([{"klass": klass, "data": {}} for _ in range(200)])
    worker = start_worker(*args, "--max-jobs", str(limit), "q")
    assert worker.wait(timeout=30) == 0
    assert popped_and_done(qless_client, jids) == (limit, limit)
    assert qless_client.queues["q"].counts["waiting"] == 200 - limit


@pytest.mark.parametrize("processes", ["0", "1"], ids=["serial", "forking"])
def test_max_duration_stops_within_a_small_margin(qless_client, start_worker, processes):
    worker = start_worker("-n", processes, "--max-duration", "2", "--interval", "5",
                          "--reap-interval", "0", "q")
    # Timed from the worker's start line, so a slow interpreter start-up on a loaded machine
    # does not count; a blocked idle wait (--interval 5) is cut to the time left.
    wait_until(lambda: " starting: " in worker.stderr(), timeout=15, step=0.005)
    started = time.monotonic()
    assert worker.wait(timeout=15) == 0
    elapsed = time.monotonic() - started
    assert 2.0 - 0.1 <= elapsed < 3.5, elapsed
