"""redis-server instructions per job when each complete.reserve completes K jobs and reserves K.

Usage: `.venv/bin/python benchmarks/batch_cost.py [--ks 1,2,4,8,16] [--jobs 240]
[--redis-server PATH]`. See benchmarks/README.md, "More jobs per call (session 8)".

No worker: the client drives the engine directly (complete_many_and_reserve with K jobs, K
more reserved per call), on a fixed clock (the test variant of the engine takes the client's
time), so how many jobs each call carries does not depend on the machine's speed, as it
does for a worker under callgrind. One redis-server under callgrind per K; counting covers
the steady-state calls only (puts and the first reserve are not counted).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402
from callgrind_redis import callgrind_redis  # noqa: E402

from django_qless.core.client import Client  # noqa: E402
from django_qless.core.server import find_redis_server  # noqa: E402


def total_instructions(annotated: str) -> int:
    """Return callgrind_annotate's PROGRAM TOTALS."""
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" in line:
            m = re.match(r"^\s*([\d,]+)", line)
            if m:
                return int(m.group(1).replace(",", ""))
    raise RuntimeError("no PROGRAM TOTALS in callgrind_annotate's output")


def per_job(binary: str, k: int, jobs: int) -> float:
    """Return instructions per job for `jobs` jobs completed K per call."""
    with callgrind_redis(binary, "bench-batch-") as cg:
        redis.Redis.from_url(cg.url).flushall()
        now = [1764000000.0]

        def clock() -> float:
            now[0] += 0.0007
            return now[0]

        client = Client(cg.url, worker_name="w1", _clock=clock)
        queue = client.queues["bench"]

        def run(n: int, counted: bool) -> int:
            queue.put_many([{"klass": "jobs.Noop", "data": {"i": i}} for i in range(n + k)])
            held, _ = client.reserve(["bench"], k)
            if counted:
                cg.counting(True)
            done = 0
            while done < n:
                _, held_next, _ = client.complete_many_and_reserve(held, ["bench"], k)
                done += len(held)
                held = held_next
            if counted:
                cg.counting(False)
            if held:
                client.complete_many_and_reserve(held, ["bench"], 0)
            return done

        run(48, False)  # warm-up: the library loaded, every path taken once
        done = run(jobs, True)
        cg.stop()
        return total_instructions(cg.annotate()) / done


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="1,2,4,8,16")
    p.add_argument("--jobs", type=int, default=240)
    p.add_argument("--redis-server", default=None)
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    for k in (int(x) for x in args.ks.split(",")):
        print(f"K={k}: {per_job(binary, k, args.jobs):,.0f} instructions per job", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
