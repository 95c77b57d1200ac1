"""Aggregate rounds (median and spread), compute django-qless's ratios and check the targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "TARGETS", "CAPACITY_TARGETS", "aggregate", "check_targets",
           "capacity_checks", "format_capacity", "format_report", "format_scale"]

OURS = "django-qless"


@dataclass(frozen=True)
class Metric:
    """One row of the table: where the number lives in an adapter's JSON."""

    key: str  # dotted path into the adapter's JSON
    label: str
    unit: str
    higher_is_better: bool
    peer_key: str | None = None  # the peers' number to divide by (default: the same key)
    peer_shown: bool = False  # the table shows the peers' peer_key number in this row


METRICS = [
    Metric("enqueue_jobs_per_s", "enqueue, single put", "jobs/s", True),
    Metric("bulk_jobs_per_s", "enqueue, bulk put_many", "jobs/s", True, "enqueue_jobs_per_s"),
    Metric("drain_jobs_per_s", "drain, pop+complete in-process", "jobs/s", True),
    Metric("drain_plain_jobs_per_s", "drain, plain pop() + complete()", "jobs/s", True,
           "drain_jobs_per_s", True),
    Metric("worker_1.jobs_per_s", "worker 1 proc, first->last", "jobs/s", True),
    Metric("worker_1.jobs_per_s_from_launch", "worker 1 proc, from launch", "jobs/s",
           True),
    Metric("worker_2.jobs_per_s", "worker 2 procs, first->last", "jobs/s", True),
    Metric("worker_2.jobs_per_s_from_launch", "worker 2 procs, from launch", "jobs/s", True),
    Metric("latency_p50_ms", "latency p50 (idle worker)", "ms", False),
    Metric("latency_p99_ms", "latency p99 (idle worker)", "ms", False),
    Metric("worker_1.redis_commands_per_job", "Redis commands/job (1 proc)", "cmds", False),
    Metric("worker_2.redis_commands_per_job", "Redis commands/job (2 procs)", "cmds", False),
    Metric("worker_1.redis_cpu_us_per_job", "Redis CPU/job (1 proc)", "us", False),
    Metric("worker_2.redis_cpu_us_per_job", "Redis CPU/job (2 procs)", "us", False),
    Metric("memory_bytes_per_10k", "Redis memory / 10k waiting jobs", "bytes", False),
    Metric("memory_bytes_per_job", "Redis memory / waiting job", "bytes", False),
    Metric("memory_lean_bytes_per_job", "Redis memory / waiting job, lean", "bytes", False),
    Metric("drain_redis_cpu_us_per_job", "Redis CPU/job, drain", "us", False),
    Metric("drain_plain_redis_cpu_us_per_job", "Redis CPU/job, plain drain", "us", False,
           "drain_redis_cpu_us_per_job", True),
    Metric("drain_redis_commands_per_job", "Redis commands/job, drain", "cmds", False),
    Metric("drain_plain_redis_commands_per_job", "Redis commands/job, plain drain", "cmds",
           False, "drain_redis_commands_per_job", True),
    Metric("enqueue_client_cpu_us_per_job", "client CPU/job, enqueue", "us", False),
    Metric("drain_client_cpu_us_per_job", "client CPU/job, drain", "us", False),
]


@dataclass(frozen=True)
class Target:
    """A goal: our metric vs a peer's metric (ratio) or vs an absolute bound."""

    text: str
    key: str
    peer: str | None = None  # None: absolute bound on our own number
    peer_key: str | None = None  # default: same key
    at_least: float | None = None  # ratio ours/peer >= this (or absolute >=)
    at_most: float | None = None  # ratio ours/peer <= this (or absolute <=)


TARGETS = [
    Target("enqueue >= 1.8x qless-py", "enqueue_jobs_per_s", "qless-py", at_least=1.8),
    Target("enqueue >= 1.05x huey", "enqueue_jobs_per_s", "huey", at_least=1.05),
    Target("bulk put >= 10x qless-py single put", "bulk_jobs_per_s", "qless-py",
           "enqueue_jobs_per_s", at_least=10),
    Target("drain >= 3x qless-py", "drain_jobs_per_s", "qless-py", at_least=3),
    Target("drain >= 2x huey", "drain_jobs_per_s", "huey", at_least=2),
    Target("worker 1 proc >= 2.5x qless-py", "worker_1.jobs_per_s", "qless-py", at_least=2.5),
    Target("worker 1 proc >= 1.5x huey", "worker_1.jobs_per_s", "huey", at_least=1.5),
    Target("worker 2 procs >= 2.5x qless-py", "worker_2.jobs_per_s", "qless-py", at_least=2.5),
    Target("worker 2 procs >= 1.25x huey", "worker_2.jobs_per_s", "huey", at_least=1.25),
    Target("latency p50 <= 1 ms", "latency_p50_ms", at_most=1.0),
    Target("latency p99 <= 3 ms", "latency_p99_ms", at_most=3.0),
    Target("Redis CPU/job <= 1/3 of qless-py (1 proc)", "worker_1.redis_cpu_us_per_job",
           "qless-py", at_most=1 / 3),
    Target("Redis commands/job <= 20 (1 proc)", "worker_1.redis_commands_per_job", at_most=20),
    Target("memory/waiting job <= 1/2 of qless-py", "memory_bytes_per_10k", "qless-py",
           at_most=0.5),
]


def _get(d: dict[str, Any], dotted: str) -> float | None:
    cur: Any = d
    for part in dotted.split("."):
        if not isinstance(cur, dict) or part not in cur:
            return None
        cur = cur[part]
    return float(cur) if isinstance(cur, (int, float)) else None


def aggregate(rounds: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Return {system: {metric key: {median, min, max, spread_pct, values}}}."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for system, results in rounds.items():
        out[system] = {}
        for m in METRICS:
            values = [v for r in results if (v := _get(r, m.key)) is not None]
            if not values:
                continue
            med = statistics.median(values)
            spread = (max(values) - min(values)) / med * 100 if med else 0.0
            out[system][m.key] = {"median": med, "min": min(values), "max": max(values),
                                  "spread_pct": spread, "values": values}
    return out


def _median(agg: dict[str, Any], system: str, key: str) -> float | None:
    entry = agg.get(system, {}).get(key)
    return None if entry is None else float(entry["median"])


def check_targets(agg: dict[str, Any]) -> list[dict[str, Any]]:
    """Evaluate every target on the medians; a target whose inputs are missing is 'n/a'."""
    results = []
    for t in TARGETS:
        ours = _median(agg, OURS, t.key)
        value: float | None = ours
        if t.peer is not None:
            theirs = _median(agg, t.peer, t.peer_key or t.key)
            value = None if ours is None or not theirs else ours / theirs
        if value is None:
            status = "n/a"
        elif t.at_least is not None:
            status = "met" if value >= t.at_least else "MISSED"
        else:
            assert t.at_most is not None
            status = "met" if value <= t.at_most else "MISSED"
        results.append({"target": t.text, "value": value, "status": status})
    return results


def _fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_report(agg: dict[str, Any], systems: list[str], targets: list[dict[str, Any]]) -> str:
    """Return the text table: medians (spread) per system, then ours/peer ratios, then targets."""
    peers = [s for s in systems if s != OURS]
    lines = []
    head = f"{'metric':36} {'unit':6}" + "".join(f" {s:>18}" for s in systems)
    lines += [head, "-" * len(head)]
    for m in METRICS:
        row = f"{m.label:36} {m.unit:6}"
        for s in systems:
            shown = m.peer_key if s != OURS and m.peer_shown and m.peer_key else m.key
            e = agg.get(s, {}).get(shown)
            if e is None:
                cell = "-"
            elif len(e["values"]) == 1:
                cell = _fmt(e["median"])
            else:
                cell = f"{_fmt(e['median'])} ±{e['spread_pct']:.0f}%"
            row += f" {cell:>18}"
        lines.append(row)
    lines += ["", "django-qless / peer (throughput: higher is better; latency, commands, CPU, "
              "memory: lower is better; bulk put is divided by the peer's single put)"]
    head = f"{'metric':36}" + "".join(f" {p:>12}" for p in peers)
    lines += [head, "-" * len(head)]
    for m in METRICS:
        ours = _median(agg, OURS, m.key)
        row = f"{m.label:36}"
        for p in peers:
            theirs = _median(agg, p, m.peer_key or m.key)
            ratio = None if ours is None or not theirs else ours / theirs
            row += f" {('-' if ratio is None else f'{ratio:.2f}x'):>12}"
        lines.append(row)
    lines += ["", "targets (on medians)"]
    for t in targets:
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        lines.append(f"  [{t['status']:^6}] {t['target']:48} {value}")
    return "\n".join(lines)


def format_scale(scale: dict[str, dict[str, Any]],
                 fields: tuple[str, str] = ("put_us", "pop_us"), unit: str = "us") -> str:
    """Return the scaling table: put/pop cost (microseconds, or `unit`) per depth and per
    queue count."""
    cases = sorted({c for per in scale.values() for c in per}, key=_case_order)
    head = f"{'system':14}" + "".join(f" {c + f' put/pop {unit}':>26}" for c in cases)
    lines = [head, "-" * len(head)]
    for system, per in scale.items():
        row = f"{system:14}"
        for c in cases:
            e = per.get(c)
            cell = "-" if e is None or fields[0] not in e else \
                f"{_fmt(e[fields[0]])} / {_fmt(e[fields[1]])}"
            row += f" {cell:>26}"
        lines.append(row)
    return "\n".join(lines)


def _case_order(case: str) -> tuple[int, int]:
    kind, _, number = case.partition("_")
    return ({"depth": 0, "queues": 1}.get(kind, 2), int(number) if number.isdigit() else 0)


# -- the "capacity per Redis core" targets ------------------------------------------------

# (row label, unit, our key, the peers' key, higher is better): the issue's table, in order.
CAPACITY_ROWS = [
    ("Redis CPU per job, worker 1 proc", "us", "worker_1.redis_cpu_us_per_job",
     "worker_1.redis_cpu_us_per_job", False),
    ("Redis commands per job, worker", "cmds", "worker_1.redis_commands_per_job",
     "worker_1.redis_commands_per_job", False),
    ("memory per waiting job", "bytes", "memory_bytes_per_job", "memory_bytes_per_job", False),
    ("memory per waiting job, lean records", "bytes", "memory_lean_bytes_per_job", "-", False),
    ("worker, 1 process", "jobs/s", "worker_1.jobs_per_s", "worker_1.jobs_per_s", True),
    ("enqueue, 1 call each", "jobs/s", "enqueue_jobs_per_s", "enqueue_jobs_per_s", True),
    ("enqueue, bulk put_many", "jobs/s", "bulk_jobs_per_s", "-", True),
    ("drain, plain pop() + complete()", "jobs/s", "drain_plain_jobs_per_s", "drain_jobs_per_s",
     True),
    ("drain, complete_and_reserve", "jobs/s", "drain_jobs_per_s", "-", True),
]

# Redis instructions per job through the core worker (300 jobs, Redis 7.0.15, 1 process,
# body one INCR) of the engine the capacity rows are set against: 27 commands and ~150 µs of
# INFO cpu a job. Instructions do not move with the machine's speed, so the Redis CPU row is
# also judged on them (<= 0.6x of that).
WORKER_BASELINE_INSTRUCTIONS = 725_918
WORKER_CPU_RATIO = 0.6

CAPACITY_TARGETS = [
    Target("Redis CPU/job through the worker <= 90 us", "worker_1.redis_cpu_us_per_job",
           at_most=90),
    Target("memory/waiting job <= 400 bytes", "memory_bytes_per_job", at_most=400),
    Target("memory/waiting job <= 0.5x qless-py", "memory_bytes_per_job", "qless-py",
           at_most=0.5),
    # Lean records: every shard keyspace writes them; the default keyspace only when asked
    # (stock qless-core scripts there read the fields a lean record leaves out).
    Target("memory/waiting job, lean records <= 400 bytes", "memory_lean_bytes_per_job",
           at_most=400),
    Target("memory/waiting job, lean records <= 0.5x qless-py", "memory_lean_bytes_per_job",
           "qless-py", "memory_bytes_per_job", at_most=0.5),
    Target("enqueue >= 1.2x huey", "enqueue_jobs_per_s", "huey", at_least=1.2),
    Target("plain pop()+complete() drain >= 1.2x huey", "drain_plain_jobs_per_s", "huey",
           "drain_jobs_per_s", at_least=1.2),
    Target("bulk put_many >= 10x qless-py single put", "bulk_jobs_per_s", "qless-py",
           "enqueue_jobs_per_s", at_least=10),
]

# The 6.2 leg: every metric within this factor of the 7.x path (in the worse direction).
LEG62_LIMIT = 1.25
LEG62_METRICS = [
    ("enqueue_jobs_per_s", True), ("bulk_jobs_per_s", True), ("drain_jobs_per_s", True),
    ("drain_plain_jobs_per_s", True), ("worker_1.jobs_per_s", True),
    ("worker_2.jobs_per_s", True), ("latency_p50_ms", False), ("latency_p99_ms", False),
    ("worker_1.redis_cpu_us_per_job", False), ("worker_1.redis_commands_per_job", False),
    ("memory_bytes_per_job", False),
]
# CPU: Redis's CPU above the same window with no worker attached (Redis's own cron and the
# harness's INFO calls cost ~1-2 ms/s on their own).
IDLE_LIMITS = {"commands_per_s": 1.0, "cpu_over_baseline_us_per_s": 20.0,
               "latency_p50_ms": 1.0, "latency_p99_ms": 2.0}
IDLE_CHILDREN = ("1", "10", "100")
SCALE_FLAT = 1.25  # "flat": the bigger case costs at most this much more per job


def _status(value: float | None, at_least: float | None = None,
            at_most: float | None = None) -> str:
    if value is None:
        return "n/a"
    if at_least is not None:
        return "met" if value >= at_least else "MISSED"
    assert at_most is not None
    return "met" if value <= at_most else "MISSED"


def _check(t: Target, agg: dict[str, Any]) -> dict[str, Any]:
    ours = _median(agg, OURS, t.key)
    value: float | None = ours
    if t.peer is not None:
        theirs = _median(agg, t.peer, t.peer_key or t.key)
        value = None if ours is None or not theirs else ours / theirs
    return {"target": t.text, "value": value, "status": _status(value, t.at_least, t.at_most)}


def leg62_slowdowns(agg: dict[str, Any], agg62: dict[str, Any]) -> dict[str, float | None]:
    """Return per metric how much worse 6.2 is than 7.x (>1: worse), on the medians."""
    out: dict[str, float | None] = {}
    for key, higher in LEG62_METRICS:
        v7, v62 = _median(agg, OURS, key), _median(agg62, OURS, key)
        if v7 is None or v62 is None or not v7 or not v62:
            out[key] = None
        else:
            out[key] = v7 / v62 if higher else v62 / v7
    return out


def _scale_ratio(scale: dict[str, Any], big: str, small: str, field: str) -> float | None:
    b, s = scale.get(big, {}).get(field), scale.get(small, {}).get(field)
    return None if b is None or not s else float(b) / float(s)


def _scale_cases(scale: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    depths = sorted(int(c.split("_")[1]) for c in scale if c.startswith("depth_"))
    queues = sorted(int(c.split("_")[1]) for c in scale if c.startswith("queues_"))
    return (f"depth_{depths[0]}" if depths else None,
            f"depth_{depths[-1]}" if len(depths) > 1 else None,
            f"queues_{queues[-1]}" if len(queues) > 1 else None)


def _idle_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the idle targets' rows: Redis CPU judged on the instructions counted under
    callgrind when measured (idle_cost.py; INFO cpu over a no-worker window cannot resolve
    20 µs/s), for the whole worker and per idle child (the issue prices a worker by one)."""
    idle = (doc.get("idle") or {}).get(OURS, {})
    counted = (doc.get("idle_callgrind") or {}).get("children", {})
    out = []
    for n in IDLE_CHILDREN:
        for field, limit in IDLE_LIMITS.items():
            rows = [(field, idle.get(n, {}).get(field))]
            if field == "cpu_over_baseline_us_per_s" and counted:
                w = counted.get(n, {})
                total = w.get("us_per_s")
                per_child = w.get("us_per_child_per_s",
                                  None if total is None else total / int(n))
                rows = [("redis_us_per_s (callgrind)", total),
                        ("redis_us_per_s per child (callgrind)", per_child)]
            out += [{"target": f"idle, {n} children: {name} <= {limit:g}", "value": value,
                     "status": _status(value, at_most=limit)} for name, value in rows]
    return out


def capacity_checks(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Evaluate every capacity target of a run document ('n/a' when not measured)."""
    agg = doc["aggregate"]
    out = [_check(t, agg) for t in CAPACITY_TARGETS]
    counted = (doc.get("worker_callgrind") or {}).get("instructions_per_job")
    ratio = None if counted is None else counted / WORKER_BASELINE_INSTRUCTIONS
    out.insert(1, {"target": f"Redis instructions/job through the worker <= "
                             f"{WORKER_CPU_RATIO:g}x the baseline's (callgrind)",
                   "value": ratio, "status": _status(ratio, at_most=WORKER_CPU_RATIO)})
    leg = doc.get("leg62") or {}
    if leg.get("aggregate"):
        for key, slow in leg62_slowdowns(agg, leg["aggregate"]).items():
            out.append({"target": f"6.2 within {LEG62_LIMIT}x of 7.x: {key}", "value": slow,
                        "status": _status(slow, at_most=LEG62_LIMIT)})
    else:
        out.append({"target": f"6.2 within {LEG62_LIMIT}x of 7.x", "value": None,
                    "status": "n/a"})
    out += _idle_checks(doc)
    scale = (doc.get("scale") or {}).get(OURS, {})
    counted = doc.get("scale_callgrind") or {}
    small, big, many = _scale_cases(scale)
    for label, case, base in (("waiting", big, small), ("queues", many, "queues_1")):
        # (the µs of INFO cpu, then the same cases' instructions where callgrind counted them)
        rows = [(scale, "put_redis_us", ""), (scale, "pop_redis_us", "")]
        if counted:
            rows += [(counted, "put_ir", " (callgrind)"), (counted, "pop_ir", " (callgrind)")]
        for source, field, how in rows:
            value = None if case is None or base is None else \
                _scale_ratio(source, case, base, field)
            out.append({"target": f"flat cost ({label}: {case} / {base}) {field}{how} <= "
                        f"{SCALE_FLAT}x", "value": value,
                        "status": _status(value, at_most=SCALE_FLAT)})
    return out


def _fmt_cell(agg: dict[str, Any], system: str, key: str) -> str:
    return _fmt(_median(agg, system, key)) if key != "-" else "-"


def format_capacity(doc: dict[str, Any]) -> str:
    """Return the capacity section: the issue's table side by side, ratios, 6.2, idle, targets."""
    agg = doc["aggregate"]
    systems = doc.get("systems") or list(agg)
    peers = [s for s in ("qless-py", "huey", "raw") if s in systems]
    others = [s for s in systems if s != OURS]
    lines = ["CAPACITY PER REDIS CORE (worker job body: "
             f"{doc.get('sizes', {}).get('body', 'noop')})"]
    head = f"{'per job':34} {'unit':6}" + "".join(f" {s:>13}" for s in [OURS, *others])
    head += "".join(f" {'/' + p:>10}" for p in peers)
    lines += [head, "-" * len(head)]
    for label, unit, ours_key, peer_key, _ in CAPACITY_ROWS:
        row = f"{label:34} {unit:6} {_fmt_cell(agg, OURS, ours_key):>13}"
        row += "".join(f" {_fmt_cell(agg, s, peer_key):>13}" for s in others)
        ours = _median(agg, OURS, ours_key)
        for p in peers:
            theirs = _median(agg, p, peer_key) if peer_key != "-" else None
            if ours_key == "bulk_jobs_per_s":
                theirs = _median(agg, p, "enqueue_jobs_per_s")
            ratio = None if ours is None or not theirs else ours / theirs
            row += f" {('-' if ratio is None else f'{ratio:.2f}x'):>10}"
        lines.append(row)
    lines.append("(/peer: django-qless / peer; bulk is divided by the peer's single put; peers' "
                 "drain is their own pop + complete)")
    leg = doc.get("leg62") or {}
    if leg.get("aggregate"):
        slow = leg62_slowdowns(agg, leg["aggregate"])
        lines += ["", f"REDIS 6.2 LEG ({leg.get('redis_version')}, EVALSHA) vs 7.x "
                  "(slowdown: >1 is worse on 6.2)"]
        head = f"{'metric':36} {'7.x':>10} {'6.2':>10} {'6.2/7.x':>8} {'slowdown':>9}"
        lines += [head, "-" * len(head)]
        for key, _ in LEG62_METRICS:
            v7, v62 = _median(agg, OURS, key), _median(leg["aggregate"], OURS, key)
            ratio = None if v7 is None or v62 is None or not v7 else v62 / v7
            lines.append(f"{key:36} {_fmt(v7):>10} {_fmt(v62):>10} "
                         f"{('-' if ratio is None else f'{ratio:.2f}'):>8} "
                         f"{('-' if slow[key] is None else f'{slow[key]:.2f}x'):>9}")
    idle = doc.get("idle") or {}
    if idle:
        lines += ["", f"IDLE WORKERS (over {doc.get('sizes', {}).get('idle_seconds', '?')} s "
                  "after settling; CPU: INFO cpu, then minus the same window with no worker; "
                  "cmdstat: commandstats usec; latency: put -> job start, all children idle)"]
        head = (f"{'system':13} {'children':>8} {'cmds/s':>8} {'CPU us/s':>9} "
                f"{'-no worker':>10} {'cmdstat us/s':>12} {'p50 ms':>7} {'p99 ms':>7}")
        lines += [head, "-" * len(head)]
        for system, per in idle.items():
            for n, e in per.items():
                lines.append(f"{system:13} {n:>8} {_fmt(e.get('commands_per_s')):>8} "
                             f"{_fmt(e.get('cpu_us_per_s')):>9} "
                             f"{_fmt(e.get('cpu_over_baseline_us_per_s')):>10} "
                             f"{_fmt(e.get('commandstats_usec_per_s')):>12} "
                             f"{_fmt(e.get('latency_p50_ms')):>7} "
                             f"{_fmt(e.get('latency_p99_ms')):>7}")
        for system, per in idle.items():
            for n, e in per.items():
                seen = list(e.get("monitor_per_s", {}).items())
                # Every command a client sent (what to cut), then the busiest Lua ones.
                top = [kv for kv in seen if kv[0].startswith("client:")] + \
                    [kv for kv in seen if not kv[0].startswith("client:")][:6]
                if top:
                    lines.append(f"  {system} x{n} per s (MONITOR): " +
                                 ", ".join(f"{k} {v:.1f}" for k, v in top))
    counted = (doc.get("worker_callgrind") or {}).get("instructions_per_job")
    if counted is not None:
        base = WORKER_BASELINE_INSTRUCTIONS
        lines += ["", f"REDIS INSTRUCTIONS PER WORKER JOB (callgrind, "
                  f"{doc['worker_callgrind'].get('jobs')} jobs through the core worker, its "
                  f"start-up included): {counted:,.0f}; when the targets were set: "
                  f"{base:,} ({counted / base:.2f}x)"]
    lines += ["", "capacity targets"]
    for t in capacity_checks(doc):
        value = "-" if t["value"] is None else f"{t['value']:.2f}"
        lines.append(f"  [{t['status']:^6}] {t['target']:62} {value}")
    return "\n".join(lines)
