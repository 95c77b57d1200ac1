"""Recently completed jobs (kept for the configured retention)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views.base import client_for, dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, load_jobs

__all__ = ["completed"]


@dashboard_view()
def completed(request: HttpRequest) -> HttpResponse:
    """List completed jobs, most recent first, paginated."""
    client = client_for(request)
    pager = get_pager(request)
    jids = list(client.jobs.complete(offset=pager.offset, count=pager.per_page + 1))
    pager = pager.with_rows(len(jids))
    now = float(client.now())
    rows = [job_row(j, now) for j in load_jobs(client, jids[: pager.per_page])]
    return render_page(request, "django_qless/completed.html",
                       {"rows": rows, "pager": pager,
                        "live_src": qurl(request, "api_completed")
                        + (f"?page={pager.number}" if pager.number > 1 else "")},
                       title="Completed jobs", crumbs=[("Completed", None)])
