"""Console pages: throughput and failure charts, the Redis server, forgetting an empty queue."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.client import Client
from django_qless.core.console import (
    failures_per_day,
    failures_per_interval,
    histogram_percentiles,
    primaries,
    read_engine_slowlog,
    server_report,
)
from django_qless.views.base import dashboard_view, qurl, redirect_back, render_page
from django_qless.views.chart_scale import y_scale
from django_qless.views.data import QUEUE_STATES, Clients, as_clients, queue_counts
from django_qless.views.shards import is_sharded, page_clients, queue_client
from django_qless.views.workers import utc_text

__all__ = ["bar_chart", "charts", "queue_forget", "redis_page"]

PERCENTILES = (50, 95, 99)


def bar_chart(values: list[int], labels: list[str], *, width: int = 600, height: int = 120,
              every: int = 1) -> dict[str, Any]:
    """Lay counts out as SVG bars (numbers and plain labels only, escaped by the template)."""
    peak = max(values) if values else 0
    scale = y_scale(peak, height)  # bars are drawn against a round top, labelled
    step = width / max(len(values), 1)
    bars = []
    for i, (value, label) in enumerate(zip(values, labels, strict=True)):
        h = 0.0 if value == 0 else max(1.0, value / scale["top"] * (height - 14))
        bars.append({"x": round(i * step, 2), "y": round(height - h, 2),
                     "w": round(max(step - 1, 1), 2), "h": round(h, 2), "value": value,
                     "label": label})
    ticks = [{"x": round(i * step, 2), "label": labels[i]} for i in range(0, len(labels), every)]
    return {"bars": bars, "peak": peak, "width": width, "height": height, "ticks": ticks,
            "total": sum(values), "scale": scale}


def _sum(rows: list[list[int]]) -> list[int]:
    """Add the shards' series element by element."""
    return [sum(column) for column in zip(*rows, strict=True)]


def _series(clients: Clients, intervals: int, seconds: float, fmt: str, every: int
            ) -> dict[str, Any]:
    shards = as_clients(clients)
    now = float(shards[0].now())
    counts = _sum([[int(c) for c in client.jobs.completed_per_interval(intervals, seconds,
                                                                          until=now)]
                   for client in shards])
    starts = [now - (intervals - i) * seconds for i in range(intervals)]
    labels = [dt.datetime.fromtimestamp(s + seconds, tz=dt.UTC).strftime(fmt) for s in starts]
    return bar_chart([int(c) for c in counts], labels, every=every)


def _failure_series(clients: Clients, intervals: int, seconds: float, fmt: str,
                    every: int) -> dict[str, Any]:
    shards = as_clients(clients)
    now = float(shards[0].now())
    parts = [failures_per_interval(client, intervals, seconds, until=now) for client in shards]
    counts = _sum([list(found) for found, _ in parts])
    capped = any(stopped for _, stopped in parts)
    starts = [now - (intervals - i) * seconds for i in range(intervals)]
    labels = [dt.datetime.fromtimestamp(s + seconds, tz=dt.UTC).strftime(fmt) for s in starts]
    return {**bar_chart(counts, labels, every=every), "capped": capped}


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    from django_qless.templatetags.qless_tags import duration

    return f"≤ {duration(value)}"


@dashboard_view()
def charts(request: HttpRequest) -> HttpResponse:
    """Show completions and failures per minute, hour and day, wait/run percentiles."""
    clients = page_clients(request)
    sharded = is_sharded(clients)
    percentiles = []
    daily: list[list[tuple[dt.date, int]]] = []
    for client in clients:
        names = client.queues.names()
        stats = client.queues.stats_many(names) if names else {}
        for name in names:
            row: dict[str, Any] = {"queue": name, **({"shard": client.shard} if sharded else {})}
            for kind in ("wait", "run"):
                part = stats.get(name, {}).get(kind) or {}
                found = histogram_percentiles(part.get("histogram") or [], PERCENTILES)
                row[kind] = [_seconds(found[p]) for p in PERCENTILES]
                row[kind + "_count"] = int(part.get("count") or 0)
            percentiles.append(row)
        daily.append(failures_per_day(client, 7, names))
    failures = [(day, sum(part[i][1] for part in daily))
                for i, (day, _) in enumerate(daily[0])]
    context = {
        "per_minute": _series(clients, 60, 60.0, "%H:%M", 10),
        "per_hour": _series(clients, 24, 3600.0, "%H:00", 4),
        "failures": bar_chart([n for _, n in failures], [d.strftime("%m-%d") for d, _ in failures]),
        "failed_minute": _failure_series(clients, 60, 60.0, "%H:%M", 10),
        "failed_hour": _failure_series(clients, 24, 3600.0, "%H:00", 4),
        "failure_days": [(d.isoformat(), n) for d, n in failures],
        "percentiles": percentiles, "ps": PERCENTILES,
    }
    return render_page(request, "django_qless/charts.html", context, title="Charts",
                       crumbs=[("Charts", None)])


def _size(value: Any) -> str:
    try:
        n = float(value)
    except (TypeError, ValueError):
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return "—"


@dashboard_view()
def redis_page(request: HttpRequest) -> HttpResponse:
    """Show the Redis (or Valkey) server's version, memory, clients, persistence, slow calls;
    for a sharded alias, each primary holding its shards (read once however many it holds)."""
    servers = []
    for node, here in primaries(page_clients(request)):
        report = server_report(here[0])
        report["used_memory_text"] = _size(report["used_memory"])
        report["used_memory_peak_text"] = _size(report["used_memory_peak"])
        report["maxmemory_text"] = (_size(report["maxmemory"]) if report["maxmemory"]
                                    else "no limit")
        report["rdb_last_save_text"] = utc_text(report["rdb_last_save"])
        report["node"] = node
        report["shards"] = [str(c.shard) for c in here if c.shard is not None]
        readable = read_engine_slowlog(here[0])
        slow = readable or []
        for entry in slow:
            entry["start_text"] = utc_text(entry["start"])
            entry["ms"] = (entry["duration_us"] or 0) / 1000
        servers.append({"server": report, "slowlog": slow, "slowlog_denied": readable is None})
    return render_page(request, "django_qless/redis.html",
                       {"servers": servers, "server": servers[0]["server"],
                        "slowlog": servers[0]["slowlog"]},
                       title="Redis", crumbs=[("Redis", None)])


def _is_empty(client: Client, name: str) -> bool | None:
    """Tell whether a known queue has no job in any indexed state (None: unknown queue)."""
    for row in queue_counts([client]):
        if row["name"] == name:
            return not any(row[s] for s in QUEUE_STATES)
    return None


@dashboard_view(manage=True)
def queue_forget(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm (GET), then forget an empty queue (POST); a queue with jobs is refused."""
    client = queue_client(request, name)
    empty = _is_empty(client, name)
    if empty is None:
        messages.info(request, f"Queue {name} is not listed: nothing to forget.")
        return HttpResponseRedirect(qurl(request, "overview"))
    if not empty:
        messages.error(request, f"Queue {name} still has jobs: only an empty queue can be "
                                f"forgotten.")
        return HttpResponseRedirect(qurl(request, "queue", name))
    if request.method != "POST":
        return render_page(request, "django_qless/queue_forget.html", {"queue": name},
                           title=f"Forget queue {name}?",
                           crumbs=[(name, qurl(request, "queue", name)), ("Forget", None)])
    client.queues[name].forget()
    messages.success(request, f"Forgot queue {name}. Putting a job in it lists it again.")
    return redirect_back(request, qurl(request, "overview"))
