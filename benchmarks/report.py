"""Aggregate rounds (median and spread) and print the tables of medians and ratios."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "OURS", "aggregate", "fmt", "format_report", "format_scale", "median"]

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


def median(agg: dict[str, Any], system: str, key: str) -> float | None:
    entry = agg.get(system, {}).get(key)
    return None if entry is None else float(entry["median"])


def fmt(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    if abs(value) >= 100:
        return f"{value:.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def format_report(agg: dict[str, Any], systems: list[str]) -> str:
    """Return the text table: medians (spread) per system, then ours / peer ratios."""
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
                cell = fmt(e["median"])
            else:
                cell = f"{fmt(e['median'])} ±{e['spread_pct']:.0f}%"
            row += f" {cell:>18}"
        lines.append(row)
    lines += ["", "django-qless / peer (throughput: higher is better; latency, commands, CPU, "
              "memory: lower is better; bulk put is divided by the peer's single put)"]
    head = f"{'metric':36}" + "".join(f" {p:>12}" for p in peers)
    lines += [head, "-" * len(head)]
    for m in METRICS:
        ours = median(agg, OURS, m.key)
        row = f"{m.label:36}"
        for p in peers:
            theirs = median(agg, p, m.peer_key or m.key)
            ratio = None if ours is None or not theirs else ours / theirs
            row += f" {('-' if ratio is None else f'{ratio:.2f}x'):>12}"
        lines.append(row)
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
                f"{fmt(e[fields[0]])} / {fmt(e[fields[1]])}"
            row += f" {cell:>26}"
        lines.append(row)
    return "\n".join(lines)


def _case_order(case: str) -> tuple[int, int]:
    kind, _, number = case.partition("_")
    return ({"depth": 0, "queues": 1}.get(kind, 2), int(number) if number.isdigit() else 0)
