"""The floor: a job is a JSON text LPUSHed to a list; the worker BRPOPs it and runs the body.

No bookkeeping at all (no job record, history, locks, retries or statistics): the least
Redis work a queue can do per job, so every library's cost can be read against it.
"""

from __future__ import annotations

import json
import os
import sys

import redis
from _common import main

__all__ = ["Raw"]

KEY = "raw:bench"


class Raw:
    """LPUSH / RPOP / BRPOP on one list per queue (redis-py, same venv as django-qless)."""

    name = "raw"
    multi_queue = True
    notes = {
        "enqueue": "LPUSH of the job JSON, one call each",
        "drain": "RPOP (no completion to record)",
        "worker": "`python raw_.py worker N QUEUE`: N forked processes, each a loop of BRPOP "
        "(1 s timeout) + the job body",
    }

    def __init__(self, url: str) -> None:
        self.url = url
        self.r = redis.Redis.from_url(url)

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self.r.lpush(f"raw:{queue}", json.dumps({"i": i, "t0": t0}))

    def fill(self, n: int, queues: list[str]) -> None:
        for start in range(0, n, 1000):
            pipe = self.r.pipeline(transaction=False)
            for i in range(start, min(n, start + 1000)):
                pipe.lpush(f"raw:{queues[i % len(queues)]}", json.dumps({"i": i, "t0": 0.0}))
            pipe.execute()

    def pop_complete(self, queues: list[str]) -> bool:
        for name in queues:
            if self.r.rpop(f"raw:{name}") is not None:
                return True
        return False

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, os.path.abspath(__file__), "worker", str(processes), queue]


def run_worker(url: str, processes: int, queue: str) -> None:
    """Fork processes - 1 children; every process loops BRPOP + body until killed."""
    from _jobbody import record

    for _ in range(processes - 1):
        if os.fork() == 0:
            break
    r = redis.Redis.from_url(url)
    key = f"raw:{queue}"
    while True:  # stopped by SIGTERM/SIGKILL from the harness (its own process group)
        got = r.brpop([key], timeout=1)
        if got is not None:
            record(float(json.loads(got[1])["t0"]))


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        run_worker(os.environ["BENCH_REDIS_URL"], int(sys.argv[2]), sys.argv[3])
    else:
        main(Raw)
