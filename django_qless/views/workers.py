"""Workers with their running and stalled counts; one worker's jobs."""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse

from django_qless.views.base import client_for, dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, load_jobs

__all__ = ["worker_detail", "workers"]


@dashboard_view()
def workers(request: HttpRequest) -> HttpResponse:
    """List workers, most recently seen first."""
    client = client_for(request)
    rows = [{"name": str(w.get("name", "")), "jobs": int(w.get("jobs", 0)),
             "stalled": int(w.get("stalled", 0))} for w in (client.workers.counts or [])]
    pager = get_pager(request, total=len(rows))
    return render_page(request, "django_qless/workers.html",
                       {"workers": rows[pager.offset:pager.offset + pager.per_page],
                        "pager": pager, "total": len(rows),
                        "live_src": qurl(request, "api_workers")},
                       title="Workers", crumbs=[("Workers", None)])


@dashboard_view()
def worker_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Show one worker's running and stalled jobs."""
    client = client_for(request)
    info = client.workers[name] or {}
    running = list(info.get("jobs") or [])
    stalled = list(info.get("stalled") or [])
    known = {str(w.get("name")) for w in (client.workers.counts or [])}
    if name not in known and not running and not stalled:
        raise Http404(f"No worker named {name!r} has been seen recently.")
    now = float(client.now())
    return render_page(request, "django_qless/worker.html",
                       {"name": name,
                        "running": [job_row(j, now) for j in load_jobs(client, running)],
                        "stalled": [job_row(j, now) for j in load_jobs(client, stalled)],
                        "live_src": qurl(request, "api_worker", name)},
                       title=f"Worker {name}",
                       crumbs=[("Workers", qurl(request, "workers")), (name, None)])
