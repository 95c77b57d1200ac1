"""A minimal 'system' for testing the harness: jobs are list items, one Lua call per job.

Run as a worker: `python fake_worker.py URL` pops with BLPOP and, per job, runs a script
that makes exactly two Redis calls, then records the job body line.
"""

from __future__ import annotations

import json
import os
import sys

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "adapters"))

from _jobbody import record  # noqa: E402

SCRIPT = "redis.call('incr', 'fake:done'); redis.call('set', 'fake:last', ARGV[1]); return 1"


class Fake:
    """The harness's adapter interface over a plain Redis list."""

    name = "fake"
    multi_queue = True
    notes = {"drain": "LPOP + INCR"}

    def __init__(self, url: str) -> None:
        self.url = url
        self.r = redis.Redis.from_url(url, decode_responses=True)

    def put(self, i: int, t0: float = 0.0, queue: str = "bench") -> None:
        self.r.rpush(f"fake:{queue}", json.dumps({"i": i, "t0": t0}))

    def fill(self, n: int, queues: list[str]) -> None:
        pipe = self.r.pipeline(transaction=False)
        for i in range(n):
            pipe.rpush(f"fake:{queues[i % len(queues)]}", json.dumps({"i": i, "t0": 0.0}))
        pipe.execute()

    def pop_complete(self, queues: list[str]) -> bool:
        for q in queues:
            if self.r.lpop(f"fake:{q}") is not None:
                self.r.incr("fake:done")
                return True
        return False

    def worker_argv(self, processes: int, queue: str) -> list[str]:
        return [sys.executable, __file__, self.url, str(processes), queue]


def run(url: str, processes: int, queue: str) -> None:
    """Fork `processes` children that work the list until stopped."""
    for _ in range(processes - 1):
        if os.fork() == 0:
            break
    r = redis.Redis.from_url(url, decode_responses=True)
    script = r.register_script(SCRIPT)
    while True:
        got = r.blpop([f"fake:{queue}"], timeout=1)
        if got is None:
            continue
        data = json.loads(got[1])
        record(float(data["t0"]))
        script(args=[data["i"]])


if __name__ == "__main__":
    run(sys.argv[1], int(sys.argv[2]), sys.argv[3])
