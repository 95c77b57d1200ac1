"""Cron schedules run by real worker subprocesses: one job per tick, idle workers wake for it."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import pytest
import redis

from django_qless.core.client import Client
from tests.helpers import WorkerProcess, wait_until
from tests.worker.jobs import ledger

__all__: list[str] = []

KLASS = "tests.worker.jobs.ok"


def clear_of_the_hour() -> float:
    """Return the time now, first waiting out the last 20 s before an hour (a new tick)."""
    now = time.time()
    if 3600 - now % 3600 < 20:
        time.sleep(3600 - now % 3600 + 1)
    return time.time()


def test_one_job_per_tick_across_forking_workers(
    redis_url: str, r: redis.Redis, start_worker: Callable[..., WorkerProcess]
) -> None:
    """Three forking workers (two children each) on a schedule 5 hours behind with catchup
    bound 3: exactly the latest 3 ticks run, once each."""
    now = clear_of_the_hour()
    registrar = Client(redis_url, _clock=lambda: now - 5 * 3600 - 60)
    registrar.schedules.register("hourly", KLASS, cron="0 * * * *", queue="q",
                                 missed="catchup", catchup=3)
    registrar.close()
    workers = [start_worker("q", "-n", "2", "--interval", "5") for _ in range(3)]
    wait_until(lambda: len(ledger(r, "done")) >= 3, timeout=30)
    time.sleep(1.0)  # room for a wrong extra job to show up
    done = ledger(r, "done")
    assert sorted(e["jid"] for e in done) == ["hourly-1", "hourly-2", "hourly-3"]
    hour = int(now // 3600 * 3600)
    reader = Client(redis_url)
    puts = sorted(reader.jobs[e["jid"]].history[0]["when"] for e in done)
    reader.close()
    assert puts == [hour - 7200, hour - 3600, hour]
    for worker in workers:
        worker.quit()


@pytest.mark.parametrize("processes", ["0", "2"], ids=["serial", "forking"])
def test_idle_worker_wakes_for_the_next_tick(
    redis_url: str, r: redis.Redis, start_worker: Callable[..., WorkerProcess], processes: str
) -> None:
    """An idle worker (its safety re-check 300 s away) runs a tick within a second."""
    client = Client(redis_url)
    client.schedules.register("yearly", KLASS, cron="0 0 1 1 *", queue="q")
    worker = start_worker("q", "-n", processes, "--interval", "300")
    client.queues["q"].put("tests.worker.jobs.ok", {})  # the worker is up and idle after it
    wait_until(lambda: len(ledger(r, "done")) == 1, timeout=15)
    time.sleep(0.5)
    tick = int(time.time()) + 2
    state = client.schedules.get("yearly")
    assert state is not None
    # A tick two seconds ahead (as the client hands over ticks), not a year.
    client.call("cron.ticks", "yearly", state.cron, state.timezone, tick + 3600,
                json.dumps([tick]))
    entry = wait_until(lambda: ledger(r, "done", "yearly-1"), timeout=10)[0]
    # (the worker's clock is the server's, measured over a round trip: a few ms apart)
    assert tick - 0.05 <= entry["t"] < tick + 1.0
    client.close()
    worker.quit()
