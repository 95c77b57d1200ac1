"""Run a ForkingWorker with recording hooks (used by test_hooks.py as a subprocess).

Usage: python -m tests.worker.hooked_worker URL [crash]
Every hook call is appended to the Redis list `test:hooks` as "<event> <pid>". With `crash`
every child raises in after_fork_child, so the supervisor's respawn back-off is exercised.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

import redis

import tests.worker.jobs  # noqa: F401 - registers the test jobs
from django_qless.core.workers import ForkingWorker, WorkerConfig, WorkerHooks


class Hooks(WorkerHooks):
    def __init__(self, url: str, crash: bool) -> None:
        self.url = url
        self.crash = crash
        self.conn: redis.Redis | None = None

    def note(self, event: str) -> None:
        # A fresh connection per process: the supervisor closes its own before each fork.
        if self.conn is None or getattr(self, "_pid", None) != os.getpid():
            self.conn = redis.Redis.from_url(self.url)
            self._pid = os.getpid()
        self.conn.rpush("test:hooks", f"{event} {os.getpid()}")

    def before_fork(self) -> None:
        self.note("before_fork")
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def after_fork_child(self) -> None:
        self.note("after_fork_child")
        if self.crash:
            raise RuntimeError("child setup failed")

    def after_fork_parent(self, pid: int) -> None:
        self.note(f"after_fork_parent:{pid}")

    def on_worker_start(self, worker: Any) -> None:
        self.note("on_worker_start")

    def on_worker_stop(self, worker: Any) -> None:
        self.note("on_worker_stop")

    def around_job(self, job: Any, call_next: Any) -> Any:
        self.note(f"around_job:{job.jid}")
        return call_next()


def main() -> int:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    url = sys.argv[1]
    crash = len(sys.argv) > 2 and sys.argv[2] == "crash"
    config = WorkerConfig(url=url, queues=("q",), processes=2, respawn_max_backoff=2.0)
    return ForkingWorker(config, Hooks(url, crash)).run_forever()


if __name__ == "__main__":
    sys.exit(main())
