"""Aggregate rounds (median and spread), compute django-qless's ratios and check the targets."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

__all__ = ["METRICS", "TARGETS", "aggregate", "check_targets", "format_report", "format_scale"]

OURS = "django-qless"


@dataclass(frozen=True)
class Metric:
    """One row of the table: where the number lives in an adapter's JSON."""

    key: str  # dotted path into the adapter's JSON
    label: str
    unit: str
    higher_is_better: bool
    peer_key: str | None = None  # the peers' number to divide by (default: the same key)


METRICS = [
    Metric("enqueue_jobs_per_s", "enqueue, single put", "jobs/s", True),
    Metric("bulk_jobs_per_s", "enqueue, bulk put_many", "jobs/s", True, "enqueue_jobs_per_s"),
    Metric("drain_jobs_per_s", "drain, pop+complete in-process", "jobs/s", True),
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
            e = agg.get(s, {}).get(m.key)
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


def format_scale(scale: dict[str, dict[str, Any]]) -> str:
    """Return the scaling table: put/pop microseconds per depth and per queue count."""
    cases = sorted({c for per in scale.values() for c in per}, key=_case_order)
    head = f"{'system':14}" + "".join(f" {c + ' put/pop us':>26}" for c in cases)
    lines = [head, "-" * len(head)]
    for system, per in scale.items():
        row = f"{system:14}"
        for c in cases:
            e = per.get(c)
            cell = "-" if e is None else f"{_fmt(e['put_us'])} / {_fmt(e['pop_us'])}"
            row += f" {cell:>26}"
        lines.append(row)
    return "\n".join(lines)


def _case_order(case: str) -> tuple[int, int]:
    kind, _, number = case.partition("_")
    return (0 if kind == "depth" else 1, int(number) if number.isdigit() else 0)
