"""The headline table (what a job costs, side by side), then the Redis 6.2 leg and the idle
workers, from one run's document."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from report import OURS, fmt, median

__all__ = ["HEADLINE", "LEG62_METRICS", "format_capacity", "format_headline", "leg62_slowdowns"]

Cell = Callable[[dict[str, Any], str], str]


def _agg(key: str, peer_key: str | None = None, lean: bool = False) -> Cell:
    """A cell holding one aggregated median (peers read `peer_key` where given)."""

    def cell(doc: dict[str, Any], system: str) -> str:
        if system != OURS and peer_key == "-":
            return "–"
        value = median(doc["aggregate"], system, key if system == OURS else peer_key or key)
        text = fmt(value) if value is not None else "–"
        lean_value = median(doc["aggregate"], system, "memory_lean_bytes_per_job")
        if lean and lean_value is not None:
            text += f" ({fmt(lean_value)} with lean records)"
        return text

    return cell


def _pair(first: str, second: str) -> Cell:
    def cell(doc: dict[str, Any], system: str) -> str:
        a, b = median(doc["aggregate"], system, first), median(doc["aggregate"], system, second)
        return "–" if a is None or b is None else f"{fmt(a)} / {fmt(b)}"

    return cell


def _idle(field: str) -> Cell:
    def cell(doc: dict[str, Any], system: str) -> str:
        per = (doc.get("idle") or {}).get(system, {})
        cells = [fmt(per[n].get(field)) if n in per else "–" for n in ("1", "10", "100")]
        return "–" if not per else " / ".join(cells)

    return cell


def _idle_counted(doc: dict[str, Any], system: str) -> str:
    counted = (doc.get("idle_callgrind") or {}).get("children", {})
    if system != OURS or not counted:
        return "–"
    return " / ".join(fmt(counted.get(n, {}).get("us_per_s")) for n in ("1", "10", "100"))


def _worker_instructions(doc: dict[str, Any], system: str) -> str:
    counted = (doc.get("worker_callgrind") or {}).get("instructions_per_job")
    return f"{counted / 1000:,.0f}k" if system == OURS and counted else "–"


def _scale_ratio(kind: str) -> Cell:
    """new case against base case, put / pop + complete, by instructions (ours)."""

    def cell(doc: dict[str, Any], system: str) -> str:
        cases = doc.get("scale_callgrind") or {}
        if system != OURS or not cases:
            return "–"
        big, base = _cases(cases, kind)
        if big is None or base is None:
            return "–"
        return " / ".join(f"{cases[big][f] / cases[base][f]:.2f}×" for f in ("put_ir", "pop_ir"))

    return cell


def _cases(cases: dict[str, Any], kind: str) -> tuple[str | None, str | None]:
    numbers = sorted(int(c.split("_")[1]) for c in cases if c.startswith(f"{kind}_"))
    if len(numbers) < 2:
        return None, None
    return f"{kind}_{numbers[-1]}", f"{kind}_{numbers[0]}"


HEADLINE: list[tuple[str, Cell]] = [
    ("enqueue, one call each (jobs/s)", _agg("enqueue_jobs_per_s")),
    ("enqueue, `put_many` (jobs/s)", _agg("bulk_jobs_per_s", "-")),
    ("drain, plain `pop()` + `complete()` (jobs/s)",
     _agg("drain_plain_jobs_per_s", "drain_jobs_per_s")),
    ("worker, 1 process (jobs/s)", _agg("worker_1.jobs_per_s")),
    ("worker, 2 processes (jobs/s)", _agg("worker_2.jobs_per_s")),
    ("Redis CPU, worker 1 process (µs)", _agg("worker_1.redis_cpu_us_per_job")),
    ("Redis instructions, worker (callgrind)", _worker_instructions),
    ("Redis commands, worker", _agg("worker_1.redis_commands_per_job")),
    ("memory per waiting job (bytes)", _agg("memory_bytes_per_job", lean=True)),
    ("idle worker, 1 / 10 / 100 children (commands/s)", _idle("commands_per_s")),
    ("idle worker, 1 / 10 / 100 children (Redis µs/s, callgrind)", _idle_counted),
    ("put → start p50 / p99, idle worker (ms)", _pair("latency_p50_ms", "latency_p99_ms")),
    ("put / pop + complete, most against fewest waiting (instructions)", _scale_ratio("depth")),
    ("put / pop + complete, most queues against 1 (instructions)", _scale_ratio("queues")),
]


def format_headline(doc: dict[str, Any]) -> str:
    """Return the headline table as Markdown: one column per system, in the run's order."""
    systems = doc.get("systems") or list(doc["aggregate"])
    systems = [OURS, *[s for s in systems if s != OURS]] if OURS in systems else systems
    names = ["raw LPUSH/BRPOP" if s == "raw" else s for s in systems]
    lines = ["| per job | " + " | ".join(names) + " |", "|---" * (len(systems) + 1) + "|"]
    for label, cell in HEADLINE:
        cells = [cell(doc, s) for s in systems]
        if all(c == "–" for c in cells):
            continue
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The 6.2 leg's rows: (metric, higher is better).
LEG62_METRICS = [
    ("enqueue_jobs_per_s", True), ("bulk_jobs_per_s", True), ("drain_jobs_per_s", True),
    ("drain_plain_jobs_per_s", True), ("worker_1.jobs_per_s", True),
    ("worker_2.jobs_per_s", True), ("latency_p50_ms", False), ("latency_p99_ms", False),
    ("worker_1.redis_cpu_us_per_job", False), ("worker_1.redis_commands_per_job", False),
    ("memory_bytes_per_job", False),
]


def leg62_slowdowns(agg: dict[str, Any], agg62: dict[str, Any]) -> dict[str, float | None]:
    """Return per metric how much worse 6.2 is than 7.x (>1: worse), on the medians."""
    out: dict[str, float | None] = {}
    for key, higher in LEG62_METRICS:
        v7, v62 = median(agg, OURS, key), median(agg62, OURS, key)
        if v7 is None or v62 is None or not v7 or not v62:
            out[key] = None
        else:
            out[key] = v7 / v62 if higher else v62 / v7
    return out


def _format_leg62(doc: dict[str, Any]) -> list[str]:
    agg, leg = doc["aggregate"], doc.get("leg62") or {}
    if not leg.get("aggregate"):
        return []
    slow = leg62_slowdowns(agg, leg["aggregate"])
    lines = ["", f"REDIS 6.2 ({leg.get('redis_version')}, EVALSHA) against 7.x "
             "(slowdown: > 1 is worse on 6.2)"]
    head = f"{'metric':36} {'7.x':>10} {'6.2':>10} {'6.2/7.x':>8} {'slowdown':>9}"
    lines += [head, "-" * len(head)]
    for key, _ in LEG62_METRICS:
        v7, v62 = median(agg, OURS, key), median(leg["aggregate"], OURS, key)
        ratio = None if v7 is None or v62 is None or not v7 else v62 / v7
        lines.append(f"{key:36} {fmt(v7):>10} {fmt(v62):>10} "
                     f"{('-' if ratio is None else f'{ratio:.2f}'):>8} "
                     f"{('-' if slow[key] is None else f'{slow[key]:.2f}x'):>9}")
    return lines


def _format_idle(doc: dict[str, Any]) -> list[str]:
    idle = doc.get("idle") or {}
    if not idle:
        return []
    lines = ["", f"IDLE WORKERS (over {doc.get('sizes', {}).get('idle_seconds', '?')} s after "
             "settling; CPU: INFO cpu, then minus the same window with no worker; cmdstat: "
             "commandstats usec; latency: put -> job start, all children idle)"]
    head = (f"{'system':13} {'children':>8} {'cmds/s':>8} {'CPU us/s':>9} "
            f"{'-no worker':>10} {'cmdstat us/s':>12} {'p50 ms':>7} {'p99 ms':>7}")
    lines += [head, "-" * len(head)]
    for system, per in idle.items():
        for n, e in per.items():
            lines.append(f"{system:13} {n:>8} {fmt(e.get('commands_per_s')):>8} "
                         f"{fmt(e.get('cpu_us_per_s')):>9} "
                         f"{fmt(e.get('cpu_over_baseline_us_per_s')):>10} "
                         f"{fmt(e.get('commandstats_usec_per_s')):>12} "
                         f"{fmt(e.get('latency_p50_ms')):>7} {fmt(e.get('latency_p99_ms')):>7}")
    for system, per in idle.items():
        for n, e in per.items():
            seen = list(e.get("monitor_per_s", {}).items())
            # Every command a client sent, then the busiest ones scripts ran.
            top = [kv for kv in seen if kv[0].startswith("client:")] + \
                [kv for kv in seen if not kv[0].startswith("client:")][:6]
            if top:
                lines.append(f"  {system} x{n} per s (MONITOR): " +
                             ", ".join(f"{k} {v:.1f}" for k, v in top))
    return lines


def format_capacity(doc: dict[str, Any]) -> str:
    """Return the headline table, then the 6.2 leg and the idle workers where measured."""
    body = doc.get("sizes", {}).get("body", "noop")
    lines = [f"WHAT A JOB COSTS (medians; worker job body: {body}; drain: the peers' own "
             "pop + complete)", format_headline(doc)]
    counted = doc.get("worker_callgrind")
    if counted:
        lines.append(f"(instructions: {counted.get('jobs')} jobs through the core worker, its "
                     f"start-up included: {counted['instructions_per_job']:,.0f} a job)")
    lines += _format_leg62(doc) + _format_idle(doc)
    return "\n".join(lines)
