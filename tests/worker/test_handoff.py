"""Idle workers get jobs handed over by the engine (reserve.wait + ql:hand:<worker>)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.registry import Registry
from django_qless.core.workers import SerialWorker, WorkerConfig
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(60)


_running: list[tuple[SerialWorker, threading.Thread]] = []


@pytest.fixture(autouse=True)
def _stop_workers() -> Iterator[None]:
    """Stop every worker thread a test started, even one that failed: a worker left running
    would take the jobs of the tests that come after it in this process."""
    yield
    while _running:
        worker, thread = _running.pop()
        worker.request_stop()
        thread.join(10)


def start(worker: SerialWorker) -> threading.Thread:
    thread = threading.Thread(target=worker.run_forever, daemon=True)
    _running.append((worker, thread))
    thread.start()
    return thread


def idle_worker(redis_url: str, registry: Registry) -> tuple[SerialWorker, threading.Thread]:
    config = WorkerConfig(url=redis_url, queues=("q",), processes=0, registry=registry,
                          name="idle", interval=30)
    worker = SerialWorker(config, install_signals=False)
    return worker, start(worker)


def count_reserves(worker: SerialWorker, reserves: list[int]) -> None:
    """Count the worker's reserve calls in `reserves[0]`."""
    real = worker.client.reserve

    def counting(*args: Any, **kwargs: Any) -> Any:
        reserves[0] += 1
        return real(*args, **kwargs)

    worker.client.reserve = counting  # type: ignore[method-assign]


def registered(qless_client: Client) -> bool:
    return qless_client.redis.hget("ql:idle", "idle") == "q"


def test_a_job_put_for_an_idle_worker_starts_without_a_reserve(
    redis_url: str, qless_client: Client
) -> None:
    started: list[tuple[str, int]] = []
    registry = Registry()
    worker: SerialWorker
    registry.register("k", lambda job: started.append((job.jid, reserves[0])))
    reserves = [0]
    worker, thread = idle_worker(redis_url, registry)
    count_reserves(worker, reserves)
    wait_until(lambda: registered(qless_client))
    before = reserves[0]
    jid = qless_client.queues["q"].put("k", {})
    wait_until(lambda: qless_client.jobs[jid].state == "complete")
    assert started == [(jid, before)]  # no reserve between the put and the start
    assert qless_client.jobs[jid].history[1]["worker"] == "idle"
    wait_until(lambda: registered(qless_client))  # idle again: registered again
    worker.request_stop()
    thread.join(10)


def test_a_paused_worker_gives_a_handed_job_back(redis_url: str, qless_client: Client) -> None:
    ran: list[str] = []
    registry = Registry()
    registry.register("k", lambda job: ran.append(job.jid))
    worker, thread = idle_worker(redis_url, registry)
    wait_until(lambda: registered(qless_client))
    worker.pause()
    jid = qless_client.queues["q"].put("k", {}, retries=2)
    # Handed over (the registration predates the pause), then released unstarted.
    wait_until(lambda: qless_client.jobs[jid].state == "waiting"
               and len(qless_client.jobs[jid].history) >= 3)
    job = qless_client.jobs[jid]
    assert [h["what"] for h in job.history] == ["put", "popped", "put"]
    assert job.retries == 2 and ran == []
    worker.unpause()
    wait_until(lambda: qless_client.jobs[jid].state == "complete")
    assert ran == [jid]
    worker.request_stop()
    thread.join(10)


def test_a_stopped_worker_is_not_handed_jobs(redis_url: str, qless_client: Client) -> None:
    registry = Registry()
    registry.register("k", lambda job: None)
    worker, thread = idle_worker(redis_url, registry)
    wait_until(lambda: registered(qless_client))
    worker.request_stop()
    thread.join(10)
    assert not thread.is_alive()
    jid = qless_client.queues["q"].put("k", {})
    assert qless_client.jobs[jid].state == "waiting"
    assert qless_client.redis.hget("ql:idle", "idle") is None  # dropped: nobody listens


def test_a_job_handed_while_a_reserve_takes_another_is_held_and_given_back(
    redis_url: str, qless_client: Client
) -> None:
    """The idle worker's re-check reserve takes one job while a put hands it another (it is
    still registered as idle): both are held, so while the first runs long the other goes
    back to waiting (rather than staying running, unheld and unheartbeated, behind it)."""
    registry = Registry()
    release = threading.Event()
    ran: list[str] = []

    def body(job: Any) -> None:
        ran.append(job.jid)
        if len(ran) == 1:
            release.wait(20)

    registry.register("k", body)
    config = WorkerConfig(url=redis_url, queues=("q",), processes=0, registry=registry,
                          name="idle", interval=0.3)
    worker = SerialWorker(config, install_signals=False)
    real = worker.client.reserve
    calls = [0]

    def racing(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:  # the re-check, still registered from the first reserve
            assert registered(qless_client)
            qless_client.queues["q"].put("k", {}, jid="handed")  # handed to "idle"
            qless_client.queues["q"].put("k", {}, jid="taken", priority=-1)
            assert qless_client.jobs["handed"].worker_name == "idle"
        return real(*args, **kwargs)

    worker.client.reserve = racing  # type: ignore[method-assign]
    thread = start(worker)
    try:
        wait_until(lambda: len(ran) == 1)
        other = ({"taken", "handed"} - set(ran)).pop()
        wait_until(lambda: qless_client.jobs[other].state == "waiting", timeout=5)
        assert len(ran) == 1
    finally:
        release.set()
    wait_until(lambda: qless_client.jobs[other].state == "complete")
    assert sorted(ran) == ["handed", "taken"]
    worker.request_stop()
    thread.join(10)


def test_a_handed_job_larger_than_one_socket_read_arrives_whole(
    redis_url: str, qless_client: Client
) -> None:
    # The hand-off subscription reads its socket 64 kB at a time: a 300 kB job, with
    # two-byte characters straddling the read boundaries, must come through intact, and
    # without a reserve (it was handed over, not popped by the worker).
    blob = "é" * 150_000 + "end"
    seen: list[tuple[str, bool, int]] = []
    registry = Registry()
    registry.register("k", lambda job: seen.append((job.jid, job.data["blob"] == blob,
                                                    reserves[0])))
    reserves = [0]
    worker, thread = idle_worker(redis_url, registry)
    count_reserves(worker, reserves)
    wait_until(lambda: registered(qless_client))
    before = reserves[0]
    jid = qless_client.queues["q"].put("k", {"blob": blob})
    wait_until(lambda: qless_client.jobs[jid].state == "complete")
    assert seen == [(jid, True, before)]
    worker.request_stop()
    thread.join(10)
