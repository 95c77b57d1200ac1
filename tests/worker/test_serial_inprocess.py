"""SerialWorker driven in-process (as Django's test runner would): hooks, aborts, stop."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from django_qless.core.client import Client
from django_qless.core.registry import Registry
from django_qless.core.workers import SerialWorker, WorkerConfig, WorkerHooks
from tests.worker.conftest import wait_until

pytestmark = pytest.mark.timeout(60)


class RecordingHooks(WorkerHooks):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_worker_start(self, worker: Any) -> None:
        self.calls.append(f"start:{worker.name}")

    def on_worker_stop(self, worker: Any) -> None:
        self.calls.append("stop")

    def before_job(self, job: Any) -> None:
        self.calls.append(f"before:{job.klass_name}")

    def after_job(self, job: Any, error: BaseException | None) -> None:
        self.calls.append(f"after:{type(error).__name__ if error else None}")

    def around_job(self, job: Any, call_next: Any) -> Any:
        self.calls.append("around[")
        try:
            return call_next()
        finally:
            self.calls.append("]around")


def run_in_thread(worker: SerialWorker) -> tuple[threading.Thread, list[int]]:
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(worker.run_forever()), daemon=True)
    thread.start()
    return thread, codes


def make(redis_url: str, registry: Registry, **options: Any) -> tuple[SerialWorker, Any]:
    hooks = RecordingHooks()
    config = WorkerConfig(url=redis_url, queues=("q",), processes=0, registry=registry,
                          name="inproc", interval=0.5, **options)
    return SerialWorker(config, hooks, install_signals=False), hooks


def test_hooks_wrap_each_job_and_worker_middleware_runs(redis_url, qless_client: Client):
    registry = Registry()
    seen: list[str] = []
    registry.register("ok", lambda job: seen.append(job.jid))

    def fail(job):
        raise KeyError("nope")

    registry.register("bad", fail)

    def mw(job, call_next):
        seen.append("mw")
        return call_next()

    worker, hooks = make(redis_url, registry, middleware=(mw,), max_jobs=2)
    good = qless_client.queues["q"].put("ok", {})
    bad = qless_client.queues["q"].put("bad", {}, priority=-1)
    thread, codes = run_in_thread(worker)
    thread.join(20)
    assert codes == [0]
    assert seen == ["mw", good, "mw"]
    assert qless_client.jobs[good].state == "complete"
    assert qless_client.jobs[bad].failure["group"] == "builtins.KeyError"
    assert hooks.calls == [
        "start:inproc",
        "around[", "before:ok", "after:None", "]around",
        "around[", "before:bad", "after:KeyError", "]around",
        "stop",
    ]


def test_cancel_aborts_the_running_job_in_process(redis_url, qless_client: Client):
    registry = Registry()
    state = {"finished": False, "aborted": False}

    def slow(job):
        try:
            for _ in range(3000):
                time.sleep(0.01)
            state["finished"] = True
        except BaseException:
            state["aborted"] = True
            raise

    registry.register("slow", slow)
    worker, _ = make(redis_url, registry)
    jid = qless_client.queues["q"].put("slow", {})
    thread, codes = run_in_thread(worker)
    wait_until(lambda: qless_client.jobs.get(jid) and qless_client.jobs[jid].state == "running")
    qless_client.jobs[jid].cancel()
    wait_until(lambda: state["aborted"], timeout=5)
    assert not state["finished"] and qless_client.jobs.get(jid) is None
    worker.request_stop()
    thread.join(10)
    assert codes == [0]


def test_in_process_time_limit(redis_url, qless_client: Client):
    registry = Registry()

    def forever(job):
        while True:
            time.sleep(0.01)

    registry.register("forever", forever)
    worker, _ = make(redis_url, registry, timeout=0.5)
    timed = qless_client.queues["q"].put("forever", {})
    thread, codes = run_in_thread(worker)
    wait_until(lambda: qless_client.jobs[timed].state == "failed", timeout=10)
    assert qless_client.jobs[timed].failure["group"] == "django_qless.JobTimeout"
    worker.request_stop()
    thread.join(10)
    assert codes == [0]


def test_stop_request_releases_the_running_job(redis_url, qless_client: Client):
    registry = Registry()

    def forever(job):
        while True:
            time.sleep(0.01)

    registry.register("forever", forever)
    worker, _ = make(redis_url, registry)
    thread, codes = run_in_thread(worker)
    held = qless_client.queues["q"].put("forever", {}, retries=4)
    wait_until(lambda: qless_client.jobs[held].state == "running")
    worker.request_stop(graceful=False)
    thread.join(10)
    assert codes == [0]
    job = qless_client.jobs[held]
    assert job.state == "waiting" and job.retries == 4


def test_worker_says_hello_with_host_pid_and_queues(redis_url, qless_client: Client):
    import os
    import socket

    registry = Registry()
    seen: list[dict[str, Any]] = []
    registry.register("probe", lambda job: seen.extend(Client(qless_client.redis).workers.info()))
    worker, _ = make(redis_url, registry, max_jobs=1)
    qless_client.queues["q"].put("probe", {})
    thread, codes = run_in_thread(worker)
    thread.join(20)
    assert codes == [0]
    [row] = seen
    assert (row["name"], row["host"], row["pid"], row["queues"]) == (
        "inproc", socket.gethostname(), os.getpid(), ["q"])
    assert qless_client.workers.info() == []  # a stopping worker takes its info with it
