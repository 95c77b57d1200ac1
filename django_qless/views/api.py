"""Read-only JSON endpoints for the same data as the pages (live refresh and scripts)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_qless.views import data
from django_qless.views.base import api_view, client_for, get_pager
from django_qless.views.jobs import get_job
from django_qless.views.queues import known_queue
from django_qless.views.tracked import TRACKED_STATES

__all__ = [
    "api_completed",
    "api_failed",
    "api_failed_group",
    "api_job",
    "api_overview",
    "api_queue",
    "api_queue_tab",
    "api_queues",
    "api_tags",
    "api_tracked",
    "api_worker",
    "api_workers",
]


def _json(payload: dict[str, Any]) -> JsonResponse:
    return JsonResponse(payload, json_dumps_params={"ensure_ascii": False})


def _rows(client: Any, jobs: list[Any]) -> list[dict[str, Any]]:
    now = float(client.now())
    rows = []
    for job in jobs:
        row = data.job_row(job, now)
        row["retries"] = f"{row['retries_left']}/{row['retries_total']}"
        rows.append(row)
    return rows


def _queue_rows(queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**q, "state": "paused" if q["paused"] else "active"} for q in queues]


@api_view
def api_overview(request: HttpRequest) -> HttpResponse:
    """Everything on the overview page."""
    info = data.overview(client_for(request))
    info["queues"] = _queue_rows(info["queues"])
    return _json(info)


@api_view
def api_queues(request: HttpRequest) -> HttpResponse:
    """Every queue's counts."""
    return _json({"queues": _queue_rows(data.queue_counts(client_for(request)))})


@api_view
def api_queue(request: HttpRequest, name: str) -> HttpResponse:
    """One queue's counts and today's statistics."""
    import datetime as dt

    client = client_for(request)
    known_queue(client, name)
    counts = next((q for q in data.queue_counts(client) if q["name"] == name), {"name": name})
    day = dt.datetime.fromtimestamp(float(client.now()), tz=dt.UTC).date()
    stats = data.stats_for_day(client, name, day)
    for kind in ("wait", "run"):
        stats[kind].pop("chart", None)
    return _json({"name": name, "counts": counts, "stats": stats, "day": day.isoformat()})


@api_view
def api_queue_tab(request: HttpRequest, name: str, state: str) -> HttpResponse:
    """One page of a queue's jobs in one state."""
    client = client_for(request)
    known_queue(client, name)
    pager = get_pager(request)
    jids = data.jobs_by_state(client, name, state, pager.offset, pager.per_page)
    if state == "recurring":
        return _json({"jids": jids})
    return _json({"jobs": _rows(client, data.load_jobs(client, jids)), "page": pager.number})


@api_view
def api_job(request: HttpRequest, jid: str) -> HttpResponse:
    """One job, with history, dependencies and failure."""
    job = get_job(request, jid)
    client = client_for(request)
    row = _rows(client, [job])[0]
    row.update(data=job.raw_data, history=job.history, failure=job.failure or None,
               dependencies=list(job.dependencies or []), dependents=list(job.dependents or []),
               spawned_from=job.spawned_from, throttles=list(job.throttles or ()))
    return _json({"job": row})


@api_view
def api_failed(request: HttpRequest) -> HttpResponse:
    """Failure groups with counts."""
    failed = client_for(request).jobs.failed() or {}
    groups = sorted(({"group": g, "count": int(n)} for g, n in failed.items()),
                    key=lambda r: (-r["count"], r["group"]))
    return _json({"groups": groups, "total": sum(g["count"] for g in groups),
                  "group_count": len(groups)})


@api_view
def api_failed_group(request: HttpRequest, group: str) -> HttpResponse:
    """One page of a failure group's jobs."""
    client = client_for(request)
    pager = get_pager(request)
    page = client.jobs.failed(group, start=pager.offset, limit=pager.per_page)
    return _json({"group": group, "total": int(page.get("total", 0)),
                  "jobs": _rows(client, list(page.get("jobs") or []))})


@api_view
def api_workers(request: HttpRequest) -> HttpResponse:
    """Workers with running and stalled counts."""
    workers = [{"name": str(w.get("name", "")), "jobs": int(w.get("jobs", 0)),
                "stalled": int(w.get("stalled", 0))}
               for w in (client_for(request).workers.counts or [])]
    return _json({"workers": workers, "total": len(workers)})


@api_view
def api_worker(request: HttpRequest, name: str) -> HttpResponse:
    """One worker's running and stalled jids."""
    info = client_for(request).workers[name] or {}
    return _json({"name": name, "jobs": list(info.get("jobs") or []),
                  "stalled": list(info.get("stalled") or [])})


@api_view
def api_tracked(request: HttpRequest) -> HttpResponse:
    """Tracked jobs (optionally ``?state=``)."""
    client = client_for(request)
    info = client.jobs.tracked() or {}
    jobs = list(info.get("jobs") or [])
    state = request.GET.get("state", "")
    if state in TRACKED_STATES:
        jobs = [j for j in jobs if j.state == state]
    pager = get_pager(request, total=len(jobs))
    return _json({"jobs": _rows(client, jobs[pager.offset:pager.offset + pager.per_page]),
                  "total": len(jobs), "expired": list(info.get("expired") or [])})


@api_view
def api_tags(request: HttpRequest) -> HttpResponse:
    """The most used tags."""
    return _json({"tags": list(client_for(request).tags.top(offset=0, count=100))})


@api_view
def api_completed(request: HttpRequest) -> HttpResponse:
    """One page of recently completed jobs."""
    client = client_for(request)
    pager = get_pager(request)
    jids = list(client.jobs.complete(offset=pager.offset, count=pager.per_page))
    return _json({"jobs": _rows(client, data.load_jobs(client, jids))})
