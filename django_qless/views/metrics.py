"""Prometheus text exposition: queue depths, failures, workers, today's counters.

On a sharded alias every per-queue series also carries a ``shard`` label (the queue's
shard); failure groups, workers and the hour's completions are summed over the shards."""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from django.http import HttpRequest, HttpResponse

from django_qless.views import data
from django_qless.views.base import api_view
from django_qless.views.shards import shard_clients

__all__ = ["metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _label(value: str) -> str:
    """Escape a label value as the exposition format requires."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: Any) -> str:
    number = float(value)
    if math.isnan(number):
        return "NaN"
    return repr(int(number)) if number.is_integer() else repr(number)


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, text: str) -> None:
        self.lines.append(f"# HELP {name} {text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, value: Any, **labels: str) -> None:
        inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
        self.lines.append(f"{name}{{{inner}}} {_number(value)}" if inner
                          else f"{name} {_number(value)}")


@api_view
def metrics(request: HttpRequest) -> HttpResponse:
    """Serve the metrics (staff session with view permission, or the bearer token)."""
    clients = shard_clients(request)
    queues = data.queue_counts(clients)

    def where(q: dict[str, Any]) -> dict[str, str]:
        """The labels naming a queue: its name, and its shard when sharded."""
        return {"queue": q["name"], **({"shard": q["shard"]} if "shard" in q else {})}

    out = _Writer()
    out.family("qless_queue_jobs", "gauge", "Jobs in a queue by state.")
    for q in queues:
        for state in data.QUEUE_STATES:
            out.sample("qless_queue_jobs", q[state], **where(q), state=state)
    out.family("qless_queue_paused", "gauge", "1 when the queue is paused.")
    for q in queues:
        out.sample("qless_queue_paused", 1 if q["paused"] else 0, **where(q))
    out.family("qless_failed_jobs", "gauge", "Failed jobs by failure group.")
    for group, count in sorted(data.failed_groups(clients).items()):
        out.sample("qless_failed_jobs", count, group=str(group))
    workers = data.worker_counts(clients)
    out.family("qless_workers", "gauge", "Workers listed (dead ones until max-worker-age).")
    out.sample("qless_workers", len(workers))
    states = data.worker_states(clients)
    out.family("qless_workers_by_state", "gauge", "Workers by state: live, draining, stale, dead.")
    for state in data.WORKER_STATES:
        out.sample("qless_workers_by_state", sum(1 for s in states.values() if s == state),
                   state=state)
    out.family("qless_worker_jobs", "gauge", "Jobs held by a worker, by lock state.")
    for w in workers:
        out.sample("qless_worker_jobs", w.get("jobs", 0), worker=str(w.get("name")),
                   state="running")
        out.sample("qless_worker_jobs", w.get("stalled", 0), worker=str(w.get("name")),
                   state="stalled")
    day = dt.datetime.fromtimestamp(float(clients[0].now()), tz=dt.UTC).date()
    # (labels, stats) per queue: each shard's queues read in one round trip.
    stats: list[tuple[dict[str, str], dict[str, Any]]] = []
    for client in clients:
        mine = [q for q in queues if q.get("shard", client.shard) == client.shard]
        found = data.stats_many(client, [q["name"] for q in mine], day) if mine else {}
        stats.extend((where(q), found[q["name"]]) for q in mine)
    for key, text in (("failures", "Jobs that failed today."),
                      ("failed", "Jobs failed today and still failed."),
                      ("retries", "Lock-loss retries today.")):
        out.family(f"qless_stats_{key}_today", "gauge", text)
        for labels, s in stats:
            out.sample(f"qless_stats_{key}_today", s[key], **labels)
    for kind in ("wait", "run"):
        out.family(f"qless_stats_{kind}_count_today", "gauge", f"Jobs measured for {kind} today.")
        for labels, s in stats:
            out.sample(f"qless_stats_{kind}_count_today", s[kind]["count"], **labels)
        out.family(f"qless_stats_{kind}_mean_seconds_today", "gauge",
                   f"Mean {kind} time today in seconds.")
        for labels, s in stats:
            out.sample(f"qless_stats_{kind}_mean_seconds_today", s[kind]["mean"], **labels)
    per_minute = data.completed_per_minute(clients)
    out.family("qless_completed_last_hour", "gauge", "Jobs completed in the last hour.")
    out.sample("qless_completed_last_hour", sum(per_minute))
    return HttpResponse("\n".join(out.lines) + "\n", content_type=CONTENT_TYPE)
