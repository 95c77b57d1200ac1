"""Recently completed jobs (kept for the configured retention)."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse

from django_qless.views.base import dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import job_row, load_jobs
from django_qless.views.shards import page_clients

__all__ = ["completed"]


@dashboard_view()
def completed(request: HttpRequest) -> HttpResponse:
    """List completed jobs, most recent first, paginated."""
    from django_qless.shard_reads import complete

    clients = page_clients(request)
    pager = get_pager(request)
    jids = complete(clients, pager.offset, pager.per_page + 1)
    pager = pager.with_rows(len(jids))
    now = float(clients[0].now())
    rows = [job_row(j, now) for j in load_jobs(clients, jids[: pager.per_page])]
    live = {k: v for k, v in request.GET.items() if k == "shard"}
    if pager.number > 1:
        live["page"] = str(pager.number)
    return render_page(request, "django_qless/completed.html",
                       {"rows": rows, "pager": pager,
                        "live_src": qurl(request, "api_completed", query=live)},
                       title="Completed jobs", crumbs=[("Completed", None)])
