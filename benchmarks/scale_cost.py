"""Redis instructions per put and per pop + complete with few or many jobs waiting, and
with the jobs spread over many queues: the scaling table counted under callgrind.

Usage: `.venv/bin/python benchmarks/scale_cost.py [--sizes 10000,1000000] [--queues 200]
[--probe 1000] [--redis-server PATH]`. `make bench` runs it after its scaling table (see
benchmarks/README.md, "How it measures").

The cases are the scaling table's: `depth_N` (N jobs waiting in one queue) for the smallest
and the largest size, and `queues_Q` (the smallest size spread over Q queues, the consumer
listing all Q); and one of its own, `running_R` (the smallest size in one queue while R
other workers each hold a running job of it: the queue's lock set holds R more entries,
benchmarks/README.md "Jobs running side by side (session 16)"). One redis-server under
callgrind per case: the fill (the bench adapter's `put_many`) and one warm-up of each step
are not counted; then `probe` single puts, then `probe` pop + completes (the drain's
`complete_and_reserve`, one engine call a job), each counted on its own, on a clock that
advances CALL_STEP per engine call. The µs of that table move with this machine's caches
and load (a 1M-job fill is ~0.5 GB); the instructions do not, so they say whether the
engine's own work per job grows with depth, breadth or the jobs running beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "adapters"), str(HERE.parent)]

from _common import _drain  # noqa: E402
from batch_cost import hold_jobs  # noqa: E402
from callgrind_redis import CallgrindError, Clock, callgrind_redis  # noqa: E402
from django_qless_ import DjangoQless  # noqa: E402

from django_qless.core import Client  # noqa: E402
from testservers.redis_server import find_redis_server  # noqa: E402

__all__ = ["CALL_STEP", "PROBE", "RUNNING", "measure", "measure_case"]

# The engine's clock advances this much per call (the client's clock, as batch_cost.py's):
# the engine keeps time-bound memos (a queue known to be listed in ql:queues for 1 s, known
# empty queues), and under valgrind Redis runs ~50x slower, so by a real clock they would
# lapse ~50x more often per job than at full speed. 0.1 ms is a put's pace at full speed here.
CALL_STEP = 0.0001
PROBE = 1000  # puts, then pop + completes, counted per case
RUNNING = 100  # other workers holding a job of the queue in the `running_R` case


def measure_case(binary: str, queues: list[str], waiting: int, probe: int,
                 running: int = 0) -> dict[str, float]:
    """Return instructions per put (`put_ir`) and per pop + complete (`pop_ir`) with
    `waiting` jobs spread over `queues` (and `running` of them held by other workers)."""
    with callgrind_redis(binary, "scale-cost-") as cg:
        clock = Clock(CALL_STEP, start=1764000000.0)
        a = DjangoQless(cg.url, Client(cg.url, _clock=clock))
        a.fill(waiting, queues)
        hold_jobs(cg.url, queues[0], running, clock)
        a.put(-1, 0.0, queues[0])  # (warm-ups: a first call may load the engine's script)
        if not a.pop_complete(queues):
            raise RuntimeError("the scale probe's warm-up found no job")
        cg.counting(True)
        for i in range(probe):
            a.put(i, 0.0, queues[i % len(queues)])
        cg.counting(False)
        cg.control("-d", "put")
        cg.counting(True)
        done, _ = _drain(a, queues, probe)
        cg.counting(False)
        cg.control("-d", "pop")
        a.client.close()
        cg.stop()
        totals = cg.dump_totals()
    if done != probe:
        raise RuntimeError(f"the scale probe popped {done} of {probe}")
    return {"put_ir": totals["put"] / probe, "pop_ir": totals["pop"] / probe}


def measure(binary: str, sizes: list[int], many_queues: int, probe: int) -> dict[str, Any]:
    """Return the cases of the scaling table, keyed as run.py's `scale` section is."""
    small, big = sizes[0], sizes[-1]
    out: dict[str, Any] = {f"depth_{small}": measure_case(binary, ["bench"], small, probe)}
    if big != small:
        out[f"depth_{big}"] = measure_case(binary, ["bench"], big, probe)
    if many_queues > 1:
        names = [f"bench{i:02d}" for i in range(many_queues)]
        out[f"queues_{many_queues}"] = measure_case(binary, names, small, probe)
        out["queues_1"] = out[f"depth_{small}"]
    if small > RUNNING:
        out[f"running_{RUNNING}"] = measure_case(binary, ["bench"], small, probe, RUNNING)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="10000,1000000")
    p.add_argument("--queues", type=int, default=200)
    p.add_argument("--probe", type=int, default=PROBE)
    p.add_argument("--redis-server", default=None)
    args = p.parse_args(argv)
    binary = args.redis_server or find_redis_server()
    try:
        out = measure(binary, [int(s) for s in args.sizes.split(",")], args.queues, args.probe)
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
