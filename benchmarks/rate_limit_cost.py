"""Count the redis-server instructions a rate limit adds to each job's pop.

`python benchmarks/rate_limit_cost.py --redis-server <binary> [--calls 200] [--mode fcall|bundle]`
runs redis-server under callgrind, puts jobs, and counts the instructions per `pop` of one
job from a queue with:

- `none`: no rate limit (the baseline every unlimited queue pays);
- `queue`: a queue limit that always has room (a budget of one sorted set);
- `keyed`: a queue limit with one budget per value of the job's `customer` field (20 keys);
- `kind`: a limit on the job class;

and, with `--unlimited-only`, just `none`. `--mode fcall` calls the Redis 7 function
library, `bundle` the per-command scripts by EVALSHA (Redis 6.2). Instruction counts do not
depend on the machine's load, but they vary by a percent or two from one server process to
the next (hash seeds, allocator state).

`--paired-with <tree>` compares unlimited pops by this engine and by the engine of another
checkout of the project (Redis 7): both function libraries are loaded into one server, and
blocks of pops by each alternate on two like queues, so the two counts share that noise.

"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "adapters"), str(HERE.parent)]

import redis  # noqa: E402
from _common import redis_cpu  # noqa: E402
from callgrind_redis import CallgrindError, Clock, callgrind_redis  # noqa: E402

from django_qless.core.engine.bundles import bundle_text  # noqa: E402
from django_qless.core.engine.lua import function_name, library_text  # noqa: E402

VARIANTS = ("none", "queue", "keyed", "kind")


def _caller(r: redis.Redis, mode: str, clock: Clock) -> Callable[..., Any]:
    """Return a function that runs one engine command on `r` (Redis 7 FCALL or EVALSHA)."""
    if mode == "fcall":
        r.function_load(library_text(), replace=True)
        fn = function_name()

        def call(command: str, *args: Any) -> Any:
            return r.fcall(fn, 0, command, repr(clock()), *args)

        return call
    shas: dict[str, str] = {}

    def call_bundle(command: str, *args: Any) -> Any:
        if command not in shas:
            text = bundle_text(command)
            assert text is not None, command
            shas[command] = r.script_load(text)
        return r.evalsha(shas[command], 0, command, repr(clock()), *args)

    return call_bundle


def _prepare(call: Callable[..., Any], variant: str, calls: int) -> str:
    """Set `variant`'s limit, put its jobs and pop 20 (warm-up); return its queue."""
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
    return queue


def measure(binary: str, calls: int, mode: str, variants: tuple[str, ...]) -> dict[str, float]:
    """Return instructions per pop for each variant."""
    try:
        with callgrind_redis(binary, prefix="bench-rl-") as cg:
            r = redis.Redis(unix_socket_path=cg.sock, decode_responses=True)
            # (a steady client clock: the engine's once-a-second work comes at the pace of a
            # full-speed run, not of valgrind's, so runs count the same work)
            call = _caller(r, mode, Clock(0.0001))
            for variant in variants:
                queue = _prepare(call, variant, calls)
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


def timed(url: str, calls: int, variants: tuple[str, ...] = VARIANTS
          ) -> dict[str, dict[str, float]]:
    """Return Redis commands (the engine's own included) and Redis main-thread CPU µs per
    pop for each variant, on a native server (a flushed database at `url`)."""
    r = redis.Redis.from_url(url, decode_responses=True)
    r.flushall()
    call = _caller(r, "fcall", Clock(0.0001))
    out: dict[str, dict[str, float]] = {}
    for variant in variants:
        queue = _prepare(call, variant, calls)
        before, cpu = _calls(r), redis_cpu(r)
        for _ in range(calls):
            call("pop", queue, "w1", "1")
        spent, after = redis_cpu(r) - cpu, _calls(r)
        # (INFO itself runs once between the two readings)
        out[variant] = {"commands": (after - before - 1) / calls,
                        "redis_us": spent * 1e6 / calls}
        if variant == "kind":
            call("rate.delete", "kind", "Limited")
    r.close()
    return out


def _calls(r: redis.Redis) -> int:
    """Return how many commands Redis ran so far (INFO commandstats, scripts' included)."""
    return sum(int(v["calls"]) for v in r.info("commandstats").values())


_LIBRARY = ("import json; from django_qless.core.engine.lua import function_name, library_text;"
            "print(json.dumps([function_name(), library_text()]))")


def other_library(tree: str) -> tuple[str, str]:
    """Return (function name, library text) of the engine in checkout `tree`."""
    out = subprocess.run([sys.executable, "-c", _LIBRARY], capture_output=True, text=True,
                         check=True, cwd=tree, env={**os.environ, "PYTHONPATH": tree}).stdout
    name, text = json.loads(out)
    return str(name), str(text)


def paired(binary: str, tree: str, calls: int, blocks: int) -> dict[str, float]:
    """Return instructions per unlimited pop by this engine and by `tree`'s, alternating."""
    other = other_library(tree)
    ours = (function_name(), library_text())
    try:
        with callgrind_redis(binary, prefix="bench-rl-pair-") as cg:
            r = redis.Redis(unix_socket_path=cg.sock, decode_responses=True)
            clock = Clock(0.0001)
            for _, text in (ours, other):
                r.function_load(text, replace=True)
            # (each engine its own queue and worker: like sets of like sizes)
            engines = {"this tree": ours[0], "other tree": other[0]}
            total = calls * blocks + 20
            for label, fn in engines.items():
                queue = "qa" if label == "this tree" else "qb"
                for i in range(total):
                    data = json.dumps({"customer": f"c{i % 20}", "n": i})
                    r.fcall(fn, 0, "put", repr(clock()), "", queue, f"{queue}-{i}", "K", data, "0")
                for _ in range(20):
                    r.fcall(fn, 0, "pop", repr(clock()), queue, "w" + queue, "1")
            # (the engine that runs first in a block pays a few percent more, whichever it
            # is: the order alternates)
            for block in range(blocks):
                order = list(engines.items())
                for label, fn in order if block % 2 == 0 else order[::-1]:
                    queue = "qa" if label == "this tree" else "qb"
                    cg.counting(True)
                    for _ in range(calls):
                        r.fcall(fn, 0, "pop", repr(clock()), queue, "w" + queue, "1")
                    cg.counting(False)
                    cg.control("-d", f"{label}/{block}")
            cg.stop()
            totals = cg.dump_totals()
    except CallgrindError as exc:
        raise SystemExit(str(exc)) from exc
    return {label: sum(totals.get(f"{label}/{b}", 0) for b in range(blocks)) / (calls * blocks)
            for label in engines}


def report(costs: dict[str, float], emit: Callable[[str], None]) -> None:
    """Print instructions per pop and what each limit adds."""
    base = costs.get("none")
    for variant, cost in costs.items():
        extra = f"  ({cost - base:+,.0f}, {100 * (cost - base) / base:+.1f} %)" \
            if base and variant != "none" else ""
        emit(f"{variant:>6}: {cost:,.0f} instructions per pop{extra}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--redis-server", default=shutil.which("redis-server") or "redis-server")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--mode", choices=("fcall", "bundle"), default="fcall")
    p.add_argument("--unlimited-only", action="store_true")
    p.add_argument("--paired-with", default=None, metavar="TREE",
                   help="compare unlimited pops with the engine of this checkout")
    p.add_argument("--blocks", type=int, default=10, help="alternations with --paired-with")
    args = p.parse_args()
    if args.paired_with:
        costs = paired(args.redis_server, args.paired_with, args.calls, args.blocks)
        ours, theirs = costs["this tree"], costs["other tree"]
        print(f"this tree:  {ours:,.0f} instructions per unlimited pop")
        print(f"other tree: {theirs:,.0f} ({100 * (ours - theirs) / theirs:+.2f} % this tree)")
        return
    variants = ("none",) if args.unlimited_only else VARIANTS
    report(measure(args.redis_server, args.calls, args.mode, variants), print)


if __name__ == "__main__":
    main()
