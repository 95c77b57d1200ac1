"""Workers with liveness (host, pid, queues, counts, last seen, stale); one worker; forget."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse

from django_qless.core.client import Client
from django_qless.core.job import Job
from django_qless.views.base import (
    api_view,
    dashboard_view,
    get_pager,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import Clients, as_clients, job_row, load_jobs, worker_counts
from django_qless.views.shards import page_clients, shard_clients

__all__ = ["api_workers_info", "stale_after", "utc_text", "worker_detail", "worker_forget",
           "worker_rows", "workers"]


def stale_after(clients: Clients) -> float:
    """Return the seconds without contact after which a worker is marked stale (the first
    shard's settings)."""
    client = as_clients(clients)[0]

    def option(name: str, default: float) -> float:
        try:
            return float(client.config[name])
        except (KeyError, TypeError, ValueError):
            return default

    # A live worker renews its leases within `heartbeat` and re-reserves every few seconds
    # when idle; `grace-period` is the engine's own allowance on top of a lease.
    return option("heartbeat", 60.0) + option("grace-period", 10.0)


def utc_text(seconds: float | None) -> str:
    """Format epoch seconds as ``YYYY-MM-DD HH:MM:SS`` in UTC (the dashboard's one zone)."""
    if not seconds:
        return ""
    try:
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC).strftime("%Y-%m-%d %H:%M:%S")
    except (OverflowError, OSError, ValueError):
        return ""


def _ago(seconds: float | None) -> str:
    if seconds is None:
        return ""
    from django_qless.templatetags.qless_tags import duration

    return f"{duration(max(0.0, seconds))} ago"


def _merged_info(clients: list[Client], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Return every shard's worker info joined by name: the latest contact, the summed
    counts, every queue (a worker serving queues of several shards reports to each)."""
    merged: dict[str, dict[str, Any]] = {}
    for client in clients:
        for info in client.workers.info(*names):
            seen = merged.get(info["name"])
            if seen is None:
                merged[info["name"]] = dict(info)
                continue
            if (info["last_seen"] or 0) > (seen["last_seen"] or 0):
                seen.update(last_seen=info["last_seen"], host=info["host"] or seen["host"],
                            pid=info["pid"] if info["pid"] is not None else seen["pid"])
            starts = [s for s in (seen["started"], info["started"]) if s]
            seen["started"] = min(starts) if starts else None
            seen["queues"] = [*seen["queues"],
                              *(q for q in info["queues"] if q not in seen["queues"])]
            seen["done"] += info["done"]
            seen["failed"] += info["failed"]
    rows = list(merged.values())
    if len(clients) > 1:
        rows.sort(key=lambda row: -(row["last_seen"] or 0))
    return rows


def worker_rows(clients: Clients, *names: str) -> list[dict[str, Any]]:
    """Join the engine's per-worker counts and info into rows (all workers, or `names`),
    over every shard."""
    shards = as_clients(clients)
    now = float(shards[0].now())
    limit = stale_after(shards)
    counts = {str(w["name"]): w for w in worker_counts(shards)}
    rows = []
    for info in _merged_info(shards, names):
        name = info["name"]
        if names and info["last_seen"] is None:
            continue  # not (or no longer) a known worker
        held = counts.get(name, {})
        seen = info["last_seen"]
        age = (now - seen) if seen is not None else None
        rows.append({
            "name": name, "host": info["host"] or "", "pid": info["pid"],
            "queues": info["queues"], "jobs": int(held.get("jobs", 0) or 0),
            "stalled": int(held.get("stalled", 0) or 0), "done": info["done"],
            "failed": info["failed"], "started": info["started"], "last_seen": seen,
            "started_text": utc_text(info["started"]), "last_seen_text": utc_text(seen),
            "last_seen_ago": _ago(age), "stale": age is not None and age > limit,
            "state": "stale" if age is not None and age > limit else "live",
        })
    return rows


@dashboard_view()
def workers(request: HttpRequest) -> HttpResponse:
    """List workers with liveness, most recently seen first."""
    clients = page_clients(request)
    rows = worker_rows(clients)
    pager = get_pager(request, total=len(rows))
    return render_page(request, "django_qless/workers.html",
                       {"workers": rows[pager.offset:pager.offset + pager.per_page],
                        "pager": pager, "total": len(rows), "stale_after": stale_after(clients),
                        # Live rows only when everything fits on one page.
                        "live": not (pager.has_previous or pager.has_next),
                        "live_src": qurl(request, "api_workers_info", query={
                            k: v for k, v in request.GET.items() if k == "shard"})},
                       title="Workers", crumbs=[("Workers", None)])


def _since(job: Job) -> float | None:
    """Return when the job's current attempt started (its last `popped` history entry)."""
    for entry in reversed(list(getattr(job, "history", None) or [])):
        if isinstance(entry, dict) and entry.get("what") == "popped":
            try:
                return float(entry.get("when") or 0) or None
            except (TypeError, ValueError):
                return None
    return None


@dashboard_view()
def worker_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Show one worker: liveness, counts and its running and stalled jobs."""
    clients = shard_clients(request)
    running: list[str] = []
    stalled: list[str] = []
    for client in clients:
        held = client.workers[name] or {}
        running.extend(held.get("jobs") or [])
        stalled.extend(held.get("stalled") or [])
    row = next(iter(worker_rows(clients, name)), None)
    if row is None and not running and not stalled:
        raise Http404(f"No worker named {name!r} has been seen recently.")
    now = float(clients[0].now())
    current = []
    for job in load_jobs(clients, running):
        item = job_row(job, now)
        item["since"] = _since(job)
        item["for"] = (now - item["since"]) if item["since"] else None
        current.append(item)
    return render_page(request, "django_qless/worker.html",
                       {"name": name, "worker": row, "current": current,
                        "stale_after": stale_after(clients),
                        "stalled": [job_row(j, now) for j in load_jobs(clients, stalled)]},
                       title=f"Worker {name}",
                       crumbs=[("Workers", qurl(request, "workers")), (name, None)])


@dashboard_view(manage=True)
def worker_forget(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm (GET), then forget a worker (POST): its entry and info, not its jobs."""
    if not worker_rows(shard_clients(request), name):
        messages.info(request, f"Worker {name} is not known (already forgotten, or never "
                               f"registered): nothing to forget.")
        return HttpResponseRedirect(qurl(request, "workers"))
    if request.method != "POST":
        return render_page(request, "django_qless/worker_forget.html", {"name": name},
                           title=f"Forget worker {name}?",
                           crumbs=[("Workers", qurl(request, "workers")),
                                   (name, qurl(request, "worker", name)), ("Forget", None)])
    for client in shard_clients(request):  # a worker registers in every shard it serves
        client.workers.deregister(name)
    messages.success(request, f"Forgot worker {name}. Jobs it still holds stay until their "
                              f"locks expire.")
    return redirect_back(request, qurl(request, "workers"))


@api_view
def api_workers_info(request: HttpRequest) -> HttpResponse:
    """Return the workers page's rows as JSON (what its live refresh polls)."""
    rows = worker_rows(page_clients(request))
    return JsonResponse({"workers": rows, "total": len(rows)})
