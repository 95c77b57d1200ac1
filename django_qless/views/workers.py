"""Workers with liveness (host, pid, queues, counts, last seen, stale); one worker; forget."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse

from django_qless.views.base import (
    api_view,
    client_for,
    dashboard_view,
    get_pager,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import job_row, load_jobs

__all__ = ["api_workers_info", "stale_after", "utc_text", "worker_detail", "worker_forget",
           "worker_rows", "workers"]


def stale_after(client: Any) -> float:
    """Return the seconds without contact after which a worker is marked stale."""
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


def worker_rows(client: Any, *names: str) -> list[dict[str, Any]]:
    """Join the engine's per-worker counts and info into rows (all workers, or `names`)."""
    now = float(client.now())
    limit = stale_after(client)
    counts = {str(w.get("name", "")): w for w in (client.workers.counts or [])}
    rows = []
    for info in client.workers.info(*names):
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
    client = client_for(request)
    rows = worker_rows(client)
    pager = get_pager(request, total=len(rows))
    return render_page(request, "django_qless/workers.html",
                       {"workers": rows[pager.offset:pager.offset + pager.per_page],
                        "pager": pager, "total": len(rows), "stale_after": stale_after(client),
                        # Live rows only when everything fits on one page.
                        "live": not (pager.has_previous or pager.has_next),
                        "live_src": qurl(request, "api_workers_info")},
                       title="Workers", crumbs=[("Workers", None)])


def _since(job: Any) -> float | None:
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
    client = client_for(request)
    held = client.workers[name] or {}
    running = list(held.get("jobs") or [])
    stalled = list(held.get("stalled") or [])
    row = next(iter(worker_rows(client, name)), None)
    if row is None and not running and not stalled:
        raise Http404(f"No worker named {name!r} has been seen recently.")
    now = float(client.now())
    current = []
    for job in load_jobs(client, running):
        item = job_row(job, now)
        item["since"] = _since(job)
        item["for"] = (now - item["since"]) if item["since"] else None
        current.append(item)
    return render_page(request, "django_qless/worker.html",
                       {"name": name, "worker": row, "current": current,
                        "stale_after": stale_after(client),
                        "stalled": [job_row(j, now) for j in load_jobs(client, stalled)]},
                       title=f"Worker {name}",
                       crumbs=[("Workers", qurl(request, "workers")), (name, None)])


@dashboard_view(manage=True)
def worker_forget(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm (GET), then forget a worker (POST): its entry and info, not its jobs."""
    client = client_for(request)
    if request.method != "POST":
        return render_page(request, "django_qless/worker_forget.html", {"name": name},
                           title=f"Forget worker {name}?",
                           crumbs=[("Workers", qurl(request, "workers")),
                                   (name, qurl(request, "worker", name)), ("Forget", None)])
    client.workers.deregister(name)
    messages.success(request, f"Forgot worker {name}. Jobs it still holds stay until their "
                              f"locks expire.")
    return redirect_back(request, qurl(request, "workers"))


@api_view
def api_workers_info(request: HttpRequest) -> HttpResponse:
    """Return the workers page's rows as JSON (what its live refresh polls)."""
    rows = worker_rows(client_for(request))
    return JsonResponse({"workers": rows, "total": len(rows)})
