"""Redis instructions per job through the core worker, counted under callgrind.

redis-server runs under callgrind (counting off); a driver, run by the measured tree's own
interpreter with that tree's adapters, fills WARMUP jobs and has the worker (1 process, job
body one INCR) run them uncounted, fills `jobs` more, turns counting on, starts the worker
again and turns counting off once it has run them all: the count covers the worker's
start-up and `jobs` jobs. Instructions do not move with the machine's load or speed, as the
µs of `INFO cpu` do, so two trees compare on them within a percent or two.

Usage: `.venv/bin/python benchmarks/worker_cost.py [--jobs 300] [--tree PATH]`; `run.py`
runs it once per round (`--skip-worker-callgrind` skips it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

from callgrind_redis import CallgrindError, callgrind_redis, total_instructions  # noqa: E402

__all__ = ["JOBS", "WARMUP", "measure"]

JOBS = 300
WARMUP = 50  # jobs run before counting: the engine loaded, the worker's code paths warm


def measure(binary: str, python: str, adapters: Path, env: dict[str, str],
            jobs: int = JOBS) -> dict[str, Any]:
    """Return the instructions redis-server runs per job for the tree whose interpreter,
    adapters folder and environment are given; raise CallgrindError without valgrind."""
    with callgrind_redis(binary, "bench-worker-cg-") as cg:
        done = subprocess.run(
            [python, str(Path(__file__).resolve()), "drive", "--url", cg.url,
             "--pid", str(cg.proc.pid), "--jobs", str(jobs), "--adapters", str(adapters)],
            env=dict(env, BENCH_BODY="incr"), cwd=adapters, capture_output=True, text=True,
            timeout=1800, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"worker under callgrind failed ({done.returncode}):\n"
                               f"{done.stderr[-3000:]}")
        driven = json.loads(done.stdout.strip().splitlines()[-1])
        cg.stop()
        files = cg.outputs()
        if not files:
            raise CallgrindError("no callgrind output")
        total = total_instructions(files[-1])
    return {"jobs": jobs, "instructions_per_job": total / jobs,
            "django_qless": driven["django_qless"]}


def drive(url: str, pid: int, jobs: int, adapters: str) -> dict[str, Any]:
    """Run the warm-up and the counted worker run (inside the measured tree's interpreter)."""
    sys.path.insert(0, adapters)
    import _common
    import redis
    from django_qless_ import DjangoQless

    import django_qless

    def counting(on: bool) -> None:
        subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(pid)],
                       capture_output=True, check=False, timeout=60)

    redis.Redis.from_url(url).flushall()
    a = DjangoQless(url)
    a.fill(WARMUP, ["bench"])
    with _common._running_worker(a, 1) as (ts, proc):
        ts.wait(WARMUP, 300, proc)
    a.fill(jobs, ["bench"])
    counting(True)
    with _common._running_worker(a, 1) as (ts, proc):
        ts.wait(jobs, 600, proc)
        time.sleep(0.2)  # the last completion's reply and the worker's next reserve
        counting(False)
    return {"jobs": jobs, "django_qless": os.path.dirname(django_qless.__file__)}


def main(argv: list[str] | None = None) -> int:
    """Count one tree's instructions per job, or (`drive`) be the driver of such a count."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", nargs="?", choices=("count", "drive"), default="count")
    p.add_argument("--jobs", type=int, default=JOBS)
    p.add_argument("--tree", default=None, help="another checkout (default: this one)")
    p.add_argument("--redis-server", default=None)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--pid", type=int, help=argparse.SUPPRESS)
    p.add_argument("--adapters", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.mode == "drive":
        print(json.dumps(drive(args.url, args.pid, args.jobs, args.adapters)))
        return 0
    sys.path.insert(0, str(HERE.parent))
    import peers

    from testservers.redis_server import find_redis_server

    system = peers.checkout(args.tree) if args.tree else peers.SYSTEMS[peers.OURS]
    try:
        out = measure(args.redis_server or find_redis_server(), system.python, system.adapters,
                      system.env(), args.jobs)
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
