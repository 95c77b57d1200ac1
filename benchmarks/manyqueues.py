"""Instructions and commands per pop + complete with jobs over 1 queue vs many (callgrind).

Usage: `.venv/bin/python benchmarks/manyqueues.py [--queues 1,200] [--waiting 10000]
[--probe 1000] [--redis-server PATH]`. See benchmarks/README.md, "Many queues, session 7".

The scaling probe of run.py (`_common.measure_scale`) measured without the machine's load:
for each queue count, a private redis-server runs under callgrind; `waiting` jobs are spread
over the queues (as the probe's fill, then its `probe` puts), and the adapter's drain
(`complete_and_reserve` over the queue list, the core worker's path) takes `probe` jobs with
instrumentation on. Reported per job: instructions (total and by function family, as
attribution.py groups them) and the commands Redis ran (INFO commandstats).

Under callgrind the server runs ~50x slower, so work the engine does once per second of
clock (re-checking known-empty queues when their 1 s bound passes, writing held statistics
out) would be charged to ~50x fewer jobs than in a real run. `--rate N` (default 5,000)
runs the probe on a simulated clock instead, advanced 1/N s per pop + complete (and 50 us
per put): the client sends that time to the engine's caller-time variant (docs/engine.md,
"Server clock"; it skips the engine's TIME call, in both rows alike). `--rate 0`: the
server's real clock.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE / "adapters"), str(HERE.parent), str(HERE)]

import _common  # noqa: E402
import redis  # noqa: E402
from attribution import families, lua_range  # noqa: E402
from callgrind_redis import CallgrindError, callgrind_redis  # noqa: E402
from django_qless_ import DjangoQless  # noqa: E402

from django_qless.core import Client  # noqa: E402
from testservers.redis_server import find_redis_server  # noqa: E402


class SimClock:
    """A clock the probe moves: the client sends its time to the caller-time engine."""

    def __init__(self) -> None:
        self.t = time.time()

    def __call__(self) -> float:
        return self.t


def simulated(a: DjangoQless, url: str, rate: float) -> None:
    """Give the adapter a client on a clock advanced 1/rate s per pop + complete."""
    clock = SimClock()
    a.client = Client(url, _clock=clock)
    a.queues = {}
    put, pop_complete = a.put, a.pop_complete

    def timed_put(i: int, t0: float = 0.0, queue: str = "bench") -> None:
        clock.t += 50e-6
        put(i, t0, queue)

    def timed_pop_complete(queues: list[str]) -> bool:
        clock.t += 1.0 / rate
        return pop_complete(queues)

    a.put = timed_put  # type: ignore[method-assign]
    a.pop_complete = timed_pop_complete  # type: ignore[method-assign]


def measure(binary: str, nqueues: int, waiting: int, probe: int,
            rate: float = 0.0) -> dict[str, Any]:
    """Run the probe for one queue count under callgrind; return per-job counts."""
    names = ["bench"] if nqueues == 1 else [f"bench{i:02d}" for i in range(nqueues)]
    try:
        with callgrind_redis(binary, "bench-mq-") as cg:
            r = redis.Redis.from_url(cg.url)
            a = DjangoQless(cg.url)
            if rate > 0:
                simulated(a, cg.url, rate)
            r.flushall()
            a.fill(waiting, names)
            for i in range(probe):  # the probe's puts, spread the same way
                a.put(i, 0.0, names[i % len(names)])
            warm = 20  # engine loaded, marks made, code paths touched: not counted
            done, _ = _common._drain(a, names, warm)
            r.config_resetstat()
            cg.counting(True)
            done, _ = _common._drain(a, names, probe)
            cg.counting(False)
            if done != probe:
                raise SystemExit(f"drained {done} of {probe}")
            stats = r.info("commandstats")
            calls = {k.removeprefix("cmdstat_"): int(v["calls"]) for k, v in stats.items()}
            cg.stop()
            kept = Path(tempfile.gettempdir()) / f"bench-mq-{nqueues}.out"
            text = cg.annotate(keep_as=kept.name)
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    counted = {k: v for k, v in calls.items() if k not in ("config|resetstat", "info")}
    return {"queues": nqueues, "jobs": probe, "file": str(kept),
            "engine_calls_per_job": sum(v for k, v in counted.items() if k in ("fcall", "evalsha"))
            / probe,
            "commands_per_job": {k: v / probe for k, v in sorted(counted.items())},
            **families(text, probe, lua_range(binary))}


def main() -> None:
    """Measure each queue count and print the comparison."""
    p = argparse.ArgumentParser()
    p.add_argument("--queues", default="1,200")
    p.add_argument("--waiting", type=int, default=10_000)
    p.add_argument("--probe", type=int, default=1000)
    p.add_argument("--rate", type=float, default=5000.0,
                   help="simulated pops a second (0: the server's real clock)")
    p.add_argument("--redis-server", default=None)
    args = p.parse_args()
    binary = args.redis_server or find_redis_server()
    rows = [measure(binary, int(n), args.waiting, args.probe, args.rate)
            for n in args.queues.split(",")]
    base = rows[0]["total_ir_per_job"]
    for row in rows:
        print(f"{row['queues']:>4} queues: {row['total_ir_per_job']:>10,.0f} instructions per "
              f"pop + complete ({row['total_ir_per_job'] / base:.3f}x), "
              f"{row['engine_calls_per_job']:.3f} engine calls, "
              f"{sum(row['commands_per_job'].values()):.2f} commands per job  [{row['file']}]")
        for fam, ir in row["families_ir_per_job"].items():
            print(f"        {ir:>10,.0f}  {fam}")
        print("        commands: " + ", ".join(f"{k} {v:.2f}"
                                                 for k, v in row["commands_per_job"].items()))


if __name__ == "__main__":
    main()
