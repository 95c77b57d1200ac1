"""Compare another checkout of this project with this one, interleaved in one run.

`run.py --compare-tree PATH` measures django-qless's rows for both trees on one private Redis:
in every round, each group of metrics runs for one tree and then the other (the order swaps
each round), so a burst of load from elsewhere hits both alike; then redis-server's
instructions per worker job are counted under callgrind for each. Each tree runs from its own
files: its adapters, its `.venv` and its `django_qless` (peers.checkout). The report gives the
median of each row for both trees and new / old, and checks what a change that should not
move the speed must keep: instructions per job within 3 %, worker jobs/s with 1 and 2
processes no more than 5 % lower.
"""

from __future__ import annotations

import statistics
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers import System, package_dirs, run_adapter
from report import METRICS, aggregate, fmt, median

__all__ = ["CHECKS", "Check", "check", "format_compare", "run", "tree_info"]


@dataclass(frozen=True)
class Check:
    """A bound on new / old for one row."""

    text: str
    key: str
    at_least: float
    at_most: float | None = None


INSTRUCTIONS = "worker_instructions_per_job"
CHECKS = [
    Check("Redis instructions per job (callgrind) within 3 %", INSTRUCTIONS, 0.97, 1.03),
    Check("worker 1 process jobs/s at most 5 % lower", "worker_1.jobs_per_s", 0.95),
    Check("worker 2 processes jobs/s at most 5 % lower", "worker_2.jobs_per_s", 0.95),
]

Counter = Callable[[System], dict[str, Any] | None]


def tree_info(system: System, root: Path) -> dict[str, Any]:
    """Return where a tree is, its commit, and where its adapter and worker import from."""
    tree = system.tree or root
    rev = subprocess.run(["git", "-C", str(tree), "describe", "--always", "--dirty"],
                         capture_output=True, text=True, check=False).stdout.strip()
    return {"path": str(tree), "revision": rev or "not a git checkout",
            "django_qless": package_dirs(system)}


def run(systems: Sequence[System], url: str, s: dict[str, Any], groups: Sequence[str],
        count: Counter | None) -> dict[str, Any]:
    """Measure `groups` for each system, rounds interleaved; count instructions per worker
    job with `count` once per round (None: not counted)."""
    names = [system.name for system in systems]
    rounds: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for r in range(s["rounds"]):
        order = list(systems[r % len(systems):]) + list(systems[: r % len(systems)])
        merged: dict[str, dict[str, Any]] = {n: {} for n in names}
        for group in groups:
            for system in order:
                result = run_adapter(system, url, group, s)
                result.pop("seconds", None)
                merged[system.name].update(result)
            print(f"round {r + 1}/{s['rounds']} {group:14} done", flush=True)
        if count is not None:
            for system in order:
                counted = count(system)
                if counted is not None:
                    merged[system.name][INSTRUCTIONS] = counted["instructions_per_job"]
        for name, result in merged.items():
            rounds[name].append(result)
    agg = aggregate(rounds)
    for name, results in rounds.items():
        values = [r[INSTRUCTIONS] for r in results if INSTRUCTIONS in r]
        if values:
            agg[name][INSTRUCTIONS] = _entry(values)
    return {"systems": names, "rounds": rounds, "aggregate": agg}


def _entry(values: list[float]) -> dict[str, Any]:
    med = statistics.median(values)
    spread = (max(values) - min(values)) / med * 100 if med else 0.0
    return {"median": med, "min": min(values), "max": max(values), "spread_pct": spread,
            "values": values}


def check(agg: dict[str, Any], old: str, new: str) -> list[dict[str, Any]]:
    """Judge each check on the medians: 'ok', 'OUTSIDE', or 'n/a' where a row is missing."""
    out = []
    for c in CHECKS:
        o, n = median(agg, old, c.key), median(agg, new, c.key)
        ratio = None if o is None or n is None or not o else n / o
        if ratio is None:
            status = "n/a"
        elif ratio < c.at_least or (c.at_most is not None and ratio > c.at_most):
            status = "OUTSIDE"
        else:
            status = "ok"
        out.append({"check": c.text, "ratio": ratio, "status": status})
    return out


def format_compare(doc: dict[str, Any], old: str = "old", new: str = "new") -> str:
    """Return the table: each row's median for the old and the new tree, and new / old."""
    agg = doc["aggregate"]
    lines = [f"{name:4} {info['path']} ({info['revision']}), django_qless from "
             f"{info['django_qless']['adapter']}" for name, info in doc["trees"].items()]
    head = f"{'metric':40} {'unit':7} {old:>16} {new:>16} {'new/old':>8}"
    lines += ["", head, "-" * len(head)]
    rows = [(m.key, m.label, m.unit) for m in METRICS]
    rows.append((INSTRUCTIONS, "Redis instructions/job (callgrind)", "instr"))
    for key, label, unit in rows:
        o, n = median(agg, old, key), median(agg, new, key)
        if o is None and n is None:
            continue
        cells = []
        for name in (old, new):
            e = agg.get(name, {}).get(key)
            spread = "" if e is None or len(e["values"]) < 2 else f" ±{e['spread_pct']:.0f}%"
            cells.append(f"{fmt(None if e is None else e['median'])}{spread}")
        ratio = "-" if o is None or n is None or not o else f"{n / o:.3f}"
        lines.append(f"{label:40} {unit:7} {cells[0]:>16} {cells[1]:>16} {ratio:>8}")
    lines += ["", "checks (new / old, on the medians)"]
    for c in doc["checks"]:
        ratio = "-" if c["ratio"] is None else f"{c['ratio']:.3f}"
        lines.append(f"  [{c['status']:^7}] {c['check']:52} {ratio}")
    return "\n".join(lines)
