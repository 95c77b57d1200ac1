"""A queue's Failed tab: its failed jobs (found through the failure groups) and their count."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest, HttpResponse

from django_qless.core.client import Client
from django_qless.core.console.queue_failed import FailedOfQueues, failed_of_queues
from django_qless.views.base import dashboard_view, get_pager, qurl, render_page
from django_qless.views.data import FAILED_SCAN, job_row, load_jobs
from django_qless.views.shards import queue_client, shard_clients

__all__ = ["TAB_SCAN", "failed_tab", "queue_failed"]

TAB_SCAN = FAILED_SCAN  # failure-group entries read for the tab's count on every queue page


def _found(clients: list[Client], name: str, scan: int) -> FailedOfQueues:
    """Merge the queue's failed jobs over the shards."""
    merged = FailedOfQueues()
    for client in clients:
        part = failed_of_queues(client, [name], scan=scan)
        merged.jids.setdefault(name, []).extend(part.jids.get(name, []))
        merged.capped = merged.capped or part.capped
    return merged


def failed_tab(request: HttpRequest, name: str) -> dict[str, Any]:
    """Return the queue header's Failed tab, counted (at most TAB_SCAN entries read)."""
    found = _found(shard_clients(request), name, TAB_SCAN)
    count = found.count(name)
    return {"state": "failed", "count": f"{count}+" if found.capped else count,
            "url": qurl(request, "queue_failed", name)}


@dashboard_view()
def queue_failed(request: HttpRequest, name: str) -> HttpResponse:
    """List the queue's failed jobs, newest failure group first, paginated."""
    from django_qless.views.queues import _counts, _tabs, known_queue

    client = queue_client(request, name)
    known_queue(client, name)
    clients = shard_clients(request)
    found = _found(clients, name, 10 * TAB_SCAN)
    jids = found.jids.get(name, [])
    pager = get_pager(request, total=len(jids))
    now = float(client.now())
    rows = [job_row(job, now) for job in
            load_jobs(clients, jids[pager.offset:pager.offset + pager.per_page])]
    counts = _counts(client, name)
    tabs = _tabs(request, name, counts)  # (the tab counts as the live header does)
    return render_page(request, "django_qless/queue_failed.html",
                       {"queue": name, "state": "failed", "counts": counts, "tabs": tabs,
                        "rows": rows, "pager": pager, "capped": found.capped,
                        "scan": 10 * TAB_SCAN, "queue_shard": client.shard},
                       title=f"Queue {name}: failed",
                       crumbs=[(name, qurl(request, "queue", name)), ("failed", None)])
