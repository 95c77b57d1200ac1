"""Read-only JSON endpoints for the same data as the pages (live refresh and scripts)."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse

from django_qless.core.job import Job
from django_qless.views import data
from django_qless.views.base import api_view, get_pager
from django_qless.views.jobs import get_job
from django_qless.views.queues import known_queue
from django_qless.views.shards import page_clients, queue_client
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


def _rows(clients: data.Clients, jobs: list[Job]) -> list[dict[str, Any]]:
    now = float(data.as_clients(clients)[0].now())
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
    info = data.overview(page_clients(request))
    info["queues"] = _queue_rows(info["queues"])
    return _json(info)


@api_view
def api_queues(request: HttpRequest) -> HttpResponse:
    """Every queue's counts."""
    return _json({"queues": _queue_rows(data.queue_counts(page_clients(request)))})


@api_view
def api_queue(request: HttpRequest, name: str) -> HttpResponse:
    """One queue's counts and today's statistics."""
    import datetime as dt

    client = queue_client(request, name)
    known_queue(client, name)
    counts = next((q for q in data.queue_counts([client]) if q["name"] == name),
                  {"name": name})
    day = dt.datetime.fromtimestamp(float(client.now()), tz=dt.UTC).date()
    stats = data.stats_for_day(client, name, day)
    for kind in ("wait", "run"):
        stats[kind].pop("chart", None)
    from django_qless.views.queue_failed import failed_tab

    return _json({"name": name, "counts": counts, "stats": stats, "day": day.isoformat(),
                  "failed": failed_tab(request, name)["count"]})


@api_view
def api_queue_tab(request: HttpRequest, name: str, state: str) -> HttpResponse:
    """One page of a queue's jobs in one state."""
    client = queue_client(request, name)
    known_queue(client, name)
    pager = get_pager(request)
    jids = data.jobs_by_state(client, name, state, pager.offset, pager.per_page)
    if state == "recurring":
        return _json({"jids": jids})
    return _json({"jobs": _rows(client, data.load_jobs([client], jids)),
                  "page": pager.number})


@api_view
def api_job(request: HttpRequest, jid: str) -> HttpResponse:
    """One job, with history, dependencies and failure."""
    job = get_job(request, jid)
    row = _rows(job.client, [job])[0]
    row.update(data=job.raw_data, history=job.history, failure=job.failure or None,
               dependencies=list(job.dependencies or []), dependents=list(job.dependents or []),
               spawned_from=job.spawned_from, throttles=list(job.throttles or ()))
    return _json({"job": row})


@api_view
def api_failed(request: HttpRequest) -> HttpResponse:
    """Failure groups with counts."""
    failed = data.failed_groups(page_clients(request))
    ordered = sorted(failed.items(), key=lambda item: (-int(item[1]), item[0]))
    groups = [{"group": g, "count": int(n)} for g, n in ordered]
    return _json({"groups": groups, "total": sum(int(n) for _, n in ordered),
                  "group_count": len(groups)})


@api_view
def api_failed_group(request: HttpRequest, group: str) -> HttpResponse:
    """One page of a failure group's jobs."""
    from django_qless.shard_reads import failed_jobs
    from django_qless.views.failed import group_newest, group_snapshot

    clients = page_clients(request)
    pager = get_pager(request)
    page = failed_jobs(clients, group, pager.offset, pager.per_page)
    total = int(page.get("total") or 0)
    newest = group_newest(clients, group) if total else None
    return _json({"group": group, "total": total, "snapshot": group_snapshot(total, newest),
                  "jobs": _rows(clients, list(page.get("jobs") or []))})


@api_view
def api_workers(request: HttpRequest) -> HttpResponse:
    """Workers with running and stalled counts."""
    workers = data.worker_counts(page_clients(request))
    return _json({"workers": workers, "total": len(workers)})


@api_view
def api_worker(request: HttpRequest, name: str) -> HttpResponse:
    """One worker's running and stalled jids."""
    jobs: list[str] = []
    stalled: list[str] = []
    for client in page_clients(request):
        info = client.workers[name] or {}
        jobs.extend(info.get("jobs") or [])
        stalled.extend(info.get("stalled") or [])
    return _json({"name": name, "jobs": jobs, "stalled": stalled})


@api_view
def api_tracked(request: HttpRequest) -> HttpResponse:
    """Tracked jobs (optionally ``?state=``)."""
    clients = page_clients(request)
    jobs, expired = data.tracked_jobs(clients)
    state = request.GET.get("state", "")
    if state in TRACKED_STATES:
        jobs = [j for j in jobs if j.state == state]
    pager = get_pager(request, total=len(jobs))
    return _json({"jobs": _rows(clients, jobs[pager.offset:pager.offset + pager.per_page]),
                  "total": len(jobs), "expired": expired})


@api_view
def api_tags(request: HttpRequest) -> HttpResponse:
    """The most used tags, how many jobs carry each, and a version of the Tags page."""
    from django_qless.views.live_blocks import live_json
    from django_qless.views.tags import top_tags_counted

    return live_json(top_tags_counted(page_clients(request)))


@api_view
def api_completed(request: HttpRequest) -> HttpResponse:
    """One page of recently completed jobs."""
    from django_qless.shard_reads import complete

    clients = page_clients(request)
    pager = get_pager(request)
    jids = complete(clients, pager.offset, pager.per_page)
    return _json({"jobs": _rows(clients, data.load_jobs(clients, jids))})
