"""Tracked jobs, filterable by state."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views.base import dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, tracked_jobs
from django_qless.views.shards import page_clients

__all__ = ["TRACKED_STATES", "tracked"]

TRACKED_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "complete", "failed")


@dashboard_view()
def tracked(request: HttpRequest) -> HttpResponse:
    """List tracked jobs (optionally one state), paginated."""
    clients = page_clients(request)
    jobs, expired = tracked_jobs(clients)
    everything = len(jobs)
    now = float(clients[0].now())
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
               "total": everything, "expired": expired,
               "live_src": qurl(request, "api_tracked",
                                query={"state": state, "page": pager.number,
                                       **{k: v for k, v in request.GET.items()
                                          if k == "shard"}})}
    return render_page(request, "django_qless/tracked.html", context, title="Tracked jobs",
                       crumbs=[("Tracked", None)])
