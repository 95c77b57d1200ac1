"""rq 2.x adapter: Queue.enqueue, low-level dequeue + finish, and `rq worker` with SimpleWorker."""

from __future__ import annotations

import os
import subprocess
import sys

from _common import main
from redis import Redis
from rq import Queue
from rq.intermediate_queue import IntermediateQueue

__all__ = ["Rq"]

FUNC = "jobs_rq.noop"


class Rq:
    """Drive rq through its Queue/Job API."""

    name = "rq"
    multi_queue = True
    notes = {
        "drain": "Queue.dequeue_any (LMOVE to the intermediate list + job fetch), then in one "
        "pipeline Job.prepare_for_execution (status started) + LREM from the intermediate "
        "list, then in one pipeline Job._handle_success (status finished, Result stored, "
        "FinishedJobRegistry); the worker-level Execution/StartedJobRegistry bookkeeping is "
        "skipped",
        "worker": "`rq worker -w rq.worker.SimpleWorker -q` (no fork per job), one process per "
        "worker process requested",
    }

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = Redis.from_url(url)
        self.queues: dict[str, Queue] = {}

    def _queue(self, name: str) -> Queue:
        q = self.queues.get(name)
        if q is None:
            q = self.queues[name] = Queue(name, connection=self.conn)
        return q

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self._queue(queue).enqueue(FUNC, i, t0)

    def fill(self, n: int, queues: list[str]) -> None:
        for start in range(0, n, 1000):
            by_queue: dict[str, list] = {}
            for i in range(start, min(n, start + 1000)):
                name = queues[i % len(queues)]
                by_queue.setdefault(name, []).append(Queue.prepare_data(FUNC, (i, 0.0)))
            for name, data in by_queue.items():
                self._queue(name).enqueue_many(data)

    def pop_complete(self, queues: list[str]) -> bool:
        got = Queue.dequeue_any([self._queue(q) for q in queues], None, connection=self.conn)
        if got is None:
            return False
        job, queue = got
        with self.conn.pipeline() as pipe:
            job.prepare_for_execution("bench-drain", pipe)
            pipe.lrem(IntermediateQueue.get_intermediate_queue_key(queue.key), 1, job.id)
            pipe.execute()
        job._result = None
        with self.conn.pipeline() as pipe:
            job._handle_success(500, pipeline=pipe, worker_name="bench-drain")
            pipe.execute()
        return True

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, __file__, "worker", str(processes), queue]


def run_workers(url: str, processes: int, queue: str) -> None:
    """Start `processes` rq SimpleWorker processes and wait for them."""
    rq_bin = os.path.join(os.path.dirname(sys.executable), "rq")
    argv = [rq_bin, "worker", "-w", "rq.worker.SimpleWorker", "-q", "-u", url, queue]
    children = [subprocess.Popen(argv) for _ in range(processes)]
    for child in children:
        child.wait()


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        run_workers(os.environ["BENCH_REDIS_URL"], int(sys.argv[2]), sys.argv[3])
    else:
        main(Rq)
