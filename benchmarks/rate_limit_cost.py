"""Count the redis-server instructions a rate limit adds to each job's pop.

`python benchmarks/rate_limit_cost.py --redis-server <binary> [--calls 200] [--mode fcall|bundle]`
runs redis-server under callgrind, puts jobs, and counts the instructions per `pop` of one
job from a queue with:

- `none`: no rate limit (the baseline every unlimited queue pays);
- `queue`: a queue limit that always has room (a budget of one sorted set);
- `keyed`: a queue limit with one budget per value of the job's `customer` field (20 keys);
- `kind`: a limit on the job class;

and, with `--unlimited-only`, just `none` (run it with the engine of another tree on
PYTHONPATH to compare unlimited pops before and after a change). `--mode fcall` calls the
Redis 7 function library, `bundle` the per-command scripts by EVALSHA (Redis 6.2).
Instruction counts do not depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Callable
from typing import Any

import redis
from callgrind_redis import CallgrindError, Clock, callgrind_redis

from django_qless.core.engine.bundles import bundle_text
from django_qless.core.engine.lua import function_name, library_text

VARIANTS = ("none", "queue", "keyed", "kind")


def measure(binary: str, calls: int, mode: str, variants: tuple[str, ...]) -> dict[str, float]:
    """Return instructions per pop for each variant."""
    try:
        with callgrind_redis(binary, prefix="bench-rl-") as cg:
            r = redis.Redis(unix_socket_path=cg.sock, decode_responses=True)
            # (a steady client clock: the engine's once-a-second work comes at the pace of a
            # full-speed run, not of valgrind's, so runs count the same work)
            clock = Clock(0.0001)
            if mode == "fcall":
                r.function_load(library_text(), replace=True)
                fn = function_name()

                def call(command: str, *args: Any) -> Any:
                    return r.fcall(fn, 0, command, repr(clock()), *args)
            else:
                shas: dict[str, str] = {}

                def call(command: str, *args: Any) -> Any:
                    if command not in shas:
                        text = bundle_text(command)
                        assert text is not None, command
                        shas[command] = r.script_load(text)
                    return r.evalsha(shas[command], 0, command, repr(clock()), *args)

            for variant in variants:
                queue = f"q-{variant}"
                if variant == "queue":
                    call("rate.set", "queue", queue, 100000, 3600)
                elif variant == "keyed":
                    call("rate.set", "queue", queue, 100000, 3600, "customer")
                elif variant == "kind":
                    call("rate.set", "kind", "Limited", 100000, 3600)
                klass = "Limited" if variant == "kind" else "K"
                for i in range(calls + 20):
                    data = json.dumps({"customer": f"c{i % 20}", "n": i})
                    call("put", "", queue, f"{variant}-{i}", klass, data, "0")
                for _ in range(20):  # warm-up: loaders, memos, first keys
                    call("pop", queue, "w1", "1")
                cg.counting(True)
                for _ in range(calls):
                    call("pop", queue, "w1", "1")
                cg.counting(False)
                cg.control("-d", variant)
                if variant == "kind":
                    call("rate.delete", "kind", "Limited")
            cg.stop()
            totals = cg.dump_totals()
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    return {variant: totals.get(variant, 0) / calls for variant in variants}


def report(costs: dict[str, float], emit: Callable[[str], None]) -> None:
    """Print instructions per pop and what each limit adds."""
    base = costs.get("none")
    for variant, cost in costs.items():
        extra = f"  (+{cost - base:,.0f}, {100 * (cost - base) / base:+.1f} %)" \
            if base and variant != "none" else ""
        emit(f"{variant:>6}: {cost:,.0f} instructions per pop{extra}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--mode", choices=("fcall", "bundle"), default="fcall")
    p.add_argument("--unlimited-only", action="store_true")
    args = p.parse_args()
    variants = ("none",) if args.unlimited_only else VARIANTS
    report(measure(args.redis_server, args.calls, args.mode, variants), print)


if __name__ == "__main__":
    main()
