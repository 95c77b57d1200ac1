"""Read the engine into plain dicts shared by the HTML pages, the JSON API and the metrics."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeAlias

from django_qless.core.client import Client
from django_qless.core.console.queue_failed import failed_of_queues
from django_qless.core.job import Job
from django_qless.core.types import QlessClient
from django_qless.views.chart_scale import y_scale
from django_qless.views.shards import is_sharded, merge_counts

__all__ = [
    "QUEUE_STATES",
    "Clients",
    "as_clients",
    "completed_per_minute",
    "failed_by_queue",
    "histogram_bars",
    "job_row",
    "jobs_by_state",
    "load_jobs",
    "overview",
    "queue_counts",
    "stats_for_day",
    "stats_many",
    "failed_groups",
    "tracked_jobs",
    "WORKER_STATES",
    "state_summary",
    "worker_counts",
    "worker_states",
]

#: What a listing reads: an alias's client (every shard of it), or chosen keyspace clients.
Clients: TypeAlias = QlessClient | Sequence[Client]

QUEUE_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "recurring", "throttled")
OVERVIEW_LIMIT = 10
FAILED_SCAN = 2000  # failure-group entries read for per-queue failed counts (then "N+")


def _num(value: Any, default: float = 0) -> float:
    try:
        result = float(value)
    except (TypeError, ValueError):
        return default
    return result if math.isfinite(result) else default


def as_clients(clients: Clients) -> list[Client]:
    """Return a deployment's keyspace clients (a Client, a ShardedClient, or a list)."""
    return list(clients) if isinstance(clients, Sequence) else list(clients.clients())


def queue_counts(clients: Clients) -> list[dict[str, Any]]:
    """Return every known queue's counts with all state keys present; in a sharded
    deployment each row also names its "shard" (rows ordered by queue name)."""
    shards = as_clients(clients)
    sharded = is_sharded(shards)
    rows = []
    for client in shards:
        for item in client.queues.counts or []:
            row: dict[str, Any] = {"name": str(item.get("name", ""))}
            for key in QUEUE_STATES:
                row[key] = int(_num(item.get(key, 0)))
            row["paused"] = bool(item.get("paused", False))
            if sharded:
                row["shard"] = str(client.shard)
            rows.append(row)
    if len(shards) > 1:
        rows.sort(key=lambda row: (row["name"], row["shard"]))
    return rows


def job_row(job: Job, now: float | None = None) -> dict[str, Any]:
    """Flatten a Job for tables and JSON (raw strings; templates escape them)."""
    failure = job.failure or {}
    expires = _num(getattr(job, "expires_at", 0))
    return {
        "jid": job.jid,
        "klass": job.klass_name,
        "state": job.state,
        "queue": job.queue_name or "",
        "priority": job.priority,
        "tags": list(job.tags or ()),
        "worker": job.worker_name or "",
        "expires": expires,
        "ttl": (expires - now) if (now is not None and expires > 0) else None,
        "retries_left": job.retries,
        "retries_total": job.original_retries,
        "tracked": bool(job.tracked),
        "failure_group": failure.get("group", "") if isinstance(failure, dict) else "",
        "failure_message": failure.get("message", "") if isinstance(failure, dict) else "",
        **_failure_fields(failure if isinstance(failure, dict) else {}),
    }


def _failure_fields(failure: dict[str, Any]) -> dict[str, Any]:
    """Return when the job failed (text in the current time zone) and its message's last line."""
    from django.utils import timezone

    when = _num(failure.get("when"))
    text = ""
    if when > 0:
        moment = dt.datetime.fromtimestamp(when, tz=dt.UTC)
        text = timezone.localtime(moment).strftime("%Y-%m-%d %H:%M:%S")
    lines = [line.strip() for line in str(failure.get("message") or "").splitlines()]
    # The last non-empty line of a traceback names the exception: the useful summary.
    last = next((line for line in reversed(lines) if line), "")
    return {"failed_at_text": text, "failure_line": last[:200]}


def load_jobs(clients: Clients, jids: Iterable[str]) -> list[Job]:
    """Fetch many jobs, one round trip per shard, keeping the listing's order (a jid found
    in several shards: the first shard's)."""
    wanted = [j for j in jids if j]
    if not wanted:
        return []
    found: dict[str, Job] = {}
    for client in as_clients(clients):
        missing = [j for j in wanted if j not in found]
        if not missing:
            break
        for job in client.jobs.get_many(*missing):
            found.setdefault(job.jid, job)
    return [found[j] for j in wanted if j in found]


def jobs_by_state(client: Client, queue: str, state: str, offset: int, count: int) -> list[str]:
    """List the jids of one queue tab (indexed reads only)."""
    lister = getattr(client.queues[queue].jobs, state)
    return list(lister(offset=offset, count=count))


def completed_per_minute(clients: Clients, minutes: int = 60) -> list[int]:
    """Count jobs completed in each of the last ``minutes`` minutes (oldest first), summed
    over every shard."""
    shards = as_clients(clients)
    now = float(shards[0].now())
    total = [0] * minutes
    for client in shards:
        for i, n in enumerate(client.jobs.completed_per_interval(minutes, 60.0, now)):
            total[i] += int(n)
    return total


def _day_start(day: dt.date) -> float:
    return dt.datetime(day.year, day.month, day.day, tzinfo=dt.UTC).timestamp()


def histogram_bars(histogram: list[Any], width: int = 592, height: int = 120) -> dict[str, Any]:
    """Lay a 148-bucket histogram out as SVG bars (numbers only, safe to render)."""
    values = [int(_num(v)) for v in histogram][:148]
    peak = max(values) if values else 0
    scale = y_scale(peak, height)  # bars are drawn against a round top, labelled
    step = width / max(len(values), 1)
    bars = []
    for i, value in enumerate(values):
        h = 0.0 if value == 0 else max(1.0, value / scale["top"] * (height - 14))
        if i < 60:
            label = f"{i}s"
        elif i < 119:
            label = f"{i - 59}m"
        elif i < 142:
            label = f"{i - 118}h"
        else:
            label = f"{i - 141}d"
        bars.append({"x": round(i * step, 2), "y": round(height - h, 2),
                     "w": round(max(step - 1, 1), 2), "h": round(h, 2),
                     "value": value, "label": label})
    return {"bars": bars, "peak": peak, "width": width, "height": height, "scale": scale,
            "ticks": [{"x": round(i * step, 2), "label": t}
                      for i, t in ((0, "0s"), (60, "1m"), (119, "1h"), (142, "1d"))]}


def stats_for_day(client: Client, queue: str, day: dt.date) -> dict[str, Any]:
    """Return a queue's statistics for one UTC day, with chart geometry."""
    return _shape_stats(client.queues[queue].stats(_day_start(day) + 43200) or {})


def stats_many(client: Client, queues: list[str], day: dt.date) -> dict[str, dict[str, Any]]:
    """Return several queues' statistics for one day in one round trip."""
    raw = client.queues.stats_many(queues, _day_start(day) + 43200)
    return {name: _shape_stats(raw[name]) for name in queues}


def _shape_stats(raw: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {
        "failed": int(_num(raw.get("failed"))),
        "failures": int(_num(raw.get("failures"))),
        "retries": int(_num(raw.get("retries"))),
    }
    for kind in ("wait", "run"):
        part = raw.get(kind) or {}
        hist = part.get("histogram") or []
        result[kind] = {
            "count": int(_num(part.get("count"))),
            "mean": _num(part.get("mean")),
            "std": _num(part.get("std")),
            "histogram": [int(_num(v)) for v in hist],
            "chart": histogram_bars(list(hist)),
        }
    return result


def worker_counts(clients: Clients) -> list[dict[str, Any]]:
    """Return each worker's running and stalled job counts, summed over every shard (a
    worker may hold jobs in several), in the first shard's order, then new names."""
    merged: dict[str, dict[str, Any]] = {}
    for client in as_clients(clients):
        for w in client.workers.counts or []:
            name = str(w.get("name", ""))
            row = merged.setdefault(name, {"name": name, "jobs": 0, "stalled": 0})
            row["jobs"] += int(_num(w.get("jobs")))
            row["stalled"] += int(_num(w.get("stalled")))
    return list(merged.values())


WORKER_STATES = ("live", "draining", "stale", "dead")  # the engine's, in display order


def worker_states(clients: Clients) -> dict[str, str]:
    """Return each worker's state (live, draining, stale, dead) as its latest shard says."""
    latest: dict[str, tuple[float, str]] = {}
    for client in as_clients(clients):
        for info in client.workers.info():
            seen = info["last_seen"] or 0.0
            if info["name"] not in latest or seen > latest[info["name"]][0]:
                latest[info["name"]] = (seen, info["state"])
    return {name: state for name, (_, state) in latest.items()}


def state_summary(rows: list[dict[str, Any]]) -> str:
    """Return "3 live, 1 dead": how many workers are in each state ("" for none)."""
    counts = dict.fromkeys(WORKER_STATES, 0)
    for row in rows:
        counts[row["state"]] = counts.get(row["state"], 0) + 1
    return ", ".join(f"{n} {state}" for state, n in counts.items() if n)


def tracked_jobs(clients: Clients) -> tuple[list[Job], list[str]]:
    """Return the tracked jobs of every shard, and the tracked jids that expired."""
    jobs: list[Job] = []
    expired: list[str] = []
    for client in as_clients(clients):
        info = client.jobs.tracked() or {}
        jobs.extend(info.get("jobs") or [])
        expired.extend(info.get("expired") or [])
    return jobs, expired


def failed_groups(clients: Clients) -> dict[str, int]:
    """Return failure group -> failed jobs, summed over every shard."""
    return merge_counts(client.jobs.failed() or {} for client in as_clients(clients))


def failed_by_queue(clients: Clients, scan: int = FAILED_SCAN) -> tuple[dict[str, int], bool]:
    """Return queue -> failed jobs (the engine keeps failures by group: at most ``scan``
    group entries a shard are read) and whether the reading stopped early."""
    counts: dict[str, int] = {}
    capped = False
    for client in as_clients(clients):
        found = failed_of_queues(client, scan=scan)
        capped = capped or found.capped
        for queue, jids in found.jids.items():
            counts[queue] = counts.get(queue, 0) + len(jids)
    return counts, capped


def overview(clients: Clients) -> dict[str, Any]:
    """Gather the overview: queues, failure groups, tracked jobs, workers, throughput (every
    shard's, summed and merged)."""
    shards = as_clients(clients)
    queues = queue_counts(shards)
    failed = failed_groups(shards)
    groups = sorted(((str(g), int(_num(n))) for g, n in failed.items()),
                    key=lambda item: (-item[1], item[0]))
    tracked, _ = tracked_jobs(shards)
    tracked_by_state: dict[str, int] = {}
    for job in tracked:
        tracked_by_state[job.state] = tracked_by_state.get(job.state, 0) + 1
    workers = worker_counts(shards)
    states = worker_states(shards)
    for row in workers:
        row["state"] = states.get(row["name"], "live")
        row["stale"] = row["state"] in ("stale", "dead")
    per_minute = completed_per_minute(shards)
    totals = {key: sum(q[key] for q in queues) for key in QUEUE_STATES}
    by_queue, capped = failed_by_queue(shards) if groups else ({}, False)
    for q in queues:
        n = by_queue.get(q["name"], 0)
        q["failed"] = f"{n}+" if capped else n  # a lower bound when the reading stopped
    return {
        "queues": queues,
        "totals": totals,
        # The overview shows the biggest groups and latest workers; their pages list all.
        "failed_groups": [{"group": g, "count": n} for g, n in groups[:OVERVIEW_LIMIT]],
        "failed_group_count": len(groups),
        "failed_total": sum(n for _, n in groups),
        "tracked_by_state": tracked_by_state,
        "tracked_count": len(tracked),
        "workers": workers[:OVERVIEW_LIMIT],
        "worker_count": len(workers),
        "worker_summary": state_summary(workers),
        "completed_per_minute": per_minute,
        "completed_last_hour": sum(per_minute),
        "jobs_per_minute": round(sum(per_minute) / 60.0, 2),
    }
