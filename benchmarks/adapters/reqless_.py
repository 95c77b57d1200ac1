"""reqless 0.13.3 adapter: its Client/Queue/Job API and its ForkingWorker."""

from __future__ import annotations

import json
import os
import sys
import time
import uuid

import reqless
from _common import main
from reqless.workers.forking import ForkingWorker

__all__ = ["Reqless"]

KLASS = "jobs_reqless.NoOp"
POLL_INTERVAL = 0.01


class Reqless:
    """Drive reqless through its public API (the put fill uses its script via a pipeline)."""

    name = "reqless"
    multi_queue = True
    notes = {
        "lua_patch": "none needed: reqless 0.13.3's bundled Lua writes no globals and runs "
        "as-is on Redis 7",
        "drain": "Queue.pop() + Job.complete()",
        "worker": f"reqless.workers.forking.ForkingWorker (SerialWorker children), poll interval "
        f"{POLL_INTERVAL}s passed through the API (its CLI only accepts whole seconds, default 60)",
    }

    def __init__(self, url: str) -> None:
        self.url = url
        self.client = reqless.Client(url)
        self.queues: dict[str, reqless.Queue] = {}

    def _queue(self, name: str) -> reqless.Queue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = self.client.queues[name]
        return q

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self._queue(queue).put(KLASS, json.dumps({"i": i, "t0": t0}))

    def fill(self, n: int, queues: list[str]) -> None:
        worker = self.client.worker_name
        for start in range(0, n, 1000):
            pipe = self.client.redis.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                args = ["put", repr(time.time()), worker, queues[i % len(queues)], uuid.uuid4().hex,
                        KLASS, json.dumps({"i": i, "t0": 0.0}), 0, "priority", 0, "tags", "[]",
                        "retries", 5, "depends", "[]", "throttles", "[]"]
                self.client._lua(keys=[], args=args, client=pipe)
            pipe.execute()

    def pop_complete(self, queues: list[str]) -> bool:
        for name in queues:  # the order reqless's worker uses: first queue with a job
            job = self._queue(name).pop()
            if job:
                job.complete()
                return True
        return False

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, __file__, "worker", str(processes), queue]


def run_worker(url: str, processes: int, queue: str) -> None:
    """Do what reqless-py-worker does, with a sub-second poll interval."""
    import jobs_reqless  # noqa: F401 - preload like `reqless-py-worker -m`

    ForkingWorker([queue], reqless.Client(url), workers=processes, interval=POLL_INTERVAL).run()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        run_worker(os.environ["BENCH_REDIS_URL"], int(sys.argv[2]), sys.argv[3])
    else:
        main(Reqless)
