"""huey 3.x adapter: task enqueue, dequeue + execute in-process, and huey_consumer."""

from __future__ import annotations

import os
import sys

from _common import main

__all__ = ["Huey"]


class Huey:
    """Drive huey through its Huey/task API."""

    name = "huey"
    multi_queue = False  # one queue per Huey instance; its consumer serves one
    notes = {
        "drain": "Huey.dequeue() (RPOP + unpickle) + Huey.execute(task) (revocation check, "
        "runs the no-op, clears the revoke flag; a None result is not stored by default)",
        "worker": "`huey_consumer jobs_huey.huey -k process -w N -q` (blocking BRPOP dequeue)",
    }

    def __init__(self, url: str) -> None:
        self.url = url
        os.environ["BENCH_REDIS_URL"] = url
        os.environ["BENCH_HUEY_BLOCKING"] = "0"
        import jobs_huey

        self.huey = jobs_huey.huey
        self.noop = jobs_huey.noop

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self.noop(i, t0)

    def fill(self, n: int, queues: list[str]) -> None:
        storage = self.huey.storage
        for start in range(0, n, 1000):
            pipe = storage.conn.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                pipe.lpush(storage.queue_key, self.huey.serialize_task(self.noop.s(i, 0.0)))
            pipe.execute()

    def pop_complete(self, queues: list[str]) -> bool:
        task = self.huey.dequeue()
        if task is None:
            return False
        self.huey.execute(task)
        return True

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        consumer = os.path.join(os.path.dirname(sys.executable), "huey_consumer")
        return [consumer, "jobs_huey.huey", "-k", "process", "-w", str(processes), "-q"]


if __name__ == "__main__":
    main(Huey)
