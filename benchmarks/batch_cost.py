"""redis-server instructions per job when each complete.reserve completes K jobs and reserves K.

Usage: `.venv/bin/python benchmarks/batch_cost.py [--ks 1,2,4,8,16] [--jobs 240]
[--running 0,100] [--warmup 48] [--redis-server PATH] [--bulk] [--split]`. See
benchmarks/README.md, "More jobs per call (session 8)", "Redis 6.2, session 9" and "Jobs
running side by side (session 16)".

No worker: the client drives the engine directly (complete_many_and_reserve with K jobs, K
more reserved per call), on a fixed clock (the test variant of the engine takes the client's
time), so how many jobs each call carries does not depend on the machine's speed, as it
does for a worker under callgrind. One redis-server under callgrind per K; counting covers
the steady-state calls only (puts and the first reserve are not counted).

`--running R` first has R other workers take a job of the queue each and keep it: the
queue's lock set then holds R more entries while the counted calls insert and remove theirs
(a worker fleet on one queue). `--bulk` also counts `put_many` (500 jobs per `put.many`
call, 2,000 jobs after a 1,000-job warm-up); `--split` prints each count split by the
inclusive instructions of the engine calls, each Redis command they ran, and the rest
(attribution.py's `split`), so two servers' runs can be compared line by line.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent)]

import redis  # noqa: E402
from callgrind_redis import CallgrindRedis, Clock, callgrind_redis  # noqa: E402

from django_qless.core.client import Client  # noqa: E402
from testservers.redis_server import find_redis_server  # noqa: E402


def total_instructions(annotated: str) -> int:
    """Return callgrind_annotate's PROGRAM TOTALS."""
    for line in annotated.splitlines():
        if "PROGRAM TOTALS" in line:
            m = re.match(r"^\s*([\d,]+)", line)
            if m:
                return int(m.group(1).replace(",", ""))
    raise RuntimeError("no PROGRAM TOTALS in callgrind_annotate's output")


def _result(cg: CallgrindRedis, done: int, with_split: bool) -> tuple[float, dict[str, float]]:
    """Stop the server; return instructions per job and, if asked, their split."""
    cg.stop()
    total = total_instructions(cg.annotate()) / done
    if not with_split:
        return total, {}
    from attribution import split  # (imports the bench adapters: only when asked)

    return total, split(cg.outputs()[-1], done)


def bulk_per_job(binary: str, with_split: bool = False) -> tuple[float, dict[str, float]]:
    """Return instructions per job of put_many, 500 jobs per engine call (and the split)."""
    with callgrind_redis(binary, "bench-bulk-") as cg:
        redis.Redis.from_url(cg.url).flushall()
        queue = Client(cg.url, worker_name="w1").queues["bench"]

        def batch(n: int) -> list[dict[str, object]]:
            return [{"klass": "jobs.Noop", "data": {"i": i}} for i in range(n)]

        queue.put_many(batch(1000))  # warm-up: the library loaded, the queue known
        cg.counting(True)
        for _ in range(4):
            queue.put_many(batch(500))
        cg.counting(False)
        return _result(cg, 2000, with_split)


def hold_jobs(url: str, queue: str, workers: int, clock: Clock) -> None:
    """Have `workers` other workers take a job of `queue` each and keep it running."""
    for i in range(workers):
        other = Client(url, worker_name=f"other{i}", _clock=clock)
        if not other.reserve([queue], 1)[0]:
            raise RuntimeError(f"{queue} had no job left for other worker {i} to hold")
        other.close()


def per_job(binary: str, k: int, jobs: int, with_split: bool = False, running: int = 0,
            warmup: int = 48) -> tuple[float, dict[str, float]]:
    """Return instructions per job for `jobs` jobs completed K per call (and the split);
    `running` other workers hold a job of the same queue each all along (its lock set then
    holds theirs too); `warmup` jobs go through first, not counted."""
    with callgrind_redis(binary, "bench-batch-") as cg:
        redis.Redis.from_url(cg.url).flushall()
        clock = Clock(0.0007, start=1764000000.0)
        client = Client(cg.url, worker_name="w1", _clock=clock)
        queue = client.queues["bench"]
        if running:
            queue.put_many([{"klass": "jobs.Noop", "data": {"i": i}} for i in range(running)])
            hold_jobs(cg.url, "bench", running, clock)

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

        run(warmup, False)  # warm-up: the library loaded, every path taken once
        done = run(jobs, True)
        return _result(cg, done, with_split)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ks", default="1,2,4,8,16")
    p.add_argument("--jobs", type=int, default=240)
    p.add_argument("--redis-server", default=None)
    p.add_argument("--bulk", action="store_true", help="also count put_many (500 per call)")
    p.add_argument("--split", action="store_true",
                   help="split each count by engine call, Redis command and the rest")
    p.add_argument("--running", default="0",
                   help="other workers each holding a running job of the queue (a list: 0,100)")
    p.add_argument("--warmup", type=int, default=48,
                   help="jobs through first, not counted (over 128: ql:completed a skiplist)")
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    runs: list[tuple[str, Callable[[], tuple[float, dict[str, float]]]]] = [
        (f"K={k}" + (f", {n} running elsewhere" if n else ""),
         partial(per_job, binary, k, args.jobs, args.split, n, args.warmup))
        for n in (int(x) for x in args.running.split(",") if x)
        for k in (int(x) for x in args.ks.split(",") if x)]
    if args.bulk:
        runs.append(("put_many", lambda: bulk_per_job(binary, args.split)))
    for label, fn in runs:
        total, parts = fn()
        print(f"{label}: {total:,.0f} instructions per job", flush=True)
        for name, v in parts.items():
            if name != "total":
                print(f"    {name:70} {v:10,.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
