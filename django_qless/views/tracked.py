"""Tracked jobs, filterable by state."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views.base import client_for, dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row

__all__ = ["TRACKED_STATES", "tracked"]

TRACKED_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "complete", "failed")


@dashboard_view()
def tracked(request: HttpRequest) -> HttpResponse:
    """List tracked jobs (optionally one state), paginated."""
    client = client_for(request)
    info = client.jobs.tracked() or {}
    now = float(client.now())
    jobs = list(info.get("jobs") or [])
    counts = {s: 0 for s in TRACKED_STATES}
    for job in jobs:
        counts[job.state] = counts.get(job.state, 0) + 1
    state = request.GET.get("state", "")
    if state in counts:
        jobs = [job for job in jobs if job.state == state]
    else:
        state = ""
    pager = get_pager(request, total=len(jobs))
    rows = [job_row(job, now) for job in jobs[pager.offset:pager.offset + pager.per_page]]
    context = {"rows": rows, "pager": pager, "counts": counts, "state": state,
               "total": len(info.get("jobs") or []), "expired": list(info.get("expired") or []),
               "live_src": qurl(request, "api_tracked",
                                query={"state": state, "page": pager.number})}
    return render_page(request, "django_qless/tracked.html", context, title="Tracked jobs",
                       crumbs=[("Tracked", None)])
