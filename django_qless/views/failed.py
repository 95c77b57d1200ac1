"""Failure groups, one group's jobs, and retry-all / cancel-all with a confirmation page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse

from django_qless.core.exceptions import QlessError
from django_qless.views.base import (
    client_for,
    dashboard_view,
    get_pager,
    logger,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import job_row

__all__ = ["BULK_LIMIT", "failed_bulk", "failed_group", "failed_groups"]

BULK_LIMIT = 500  # jobs per request, like qless's retry-all


def _groups(client: Any) -> list[dict[str, Any]]:
    failed = client.jobs.failed() or {}
    rows = [{"group": str(g), "count": int(n)} for g, n in failed.items()]
    return sorted(rows, key=lambda r: (-r["count"], r["group"]))


@dashboard_view()
def failed_groups(request: HttpRequest) -> HttpResponse:
    """List failure groups with their counts."""
    client = client_for(request)
    groups = _groups(client)
    pager = get_pager(request, total=len(groups))
    return render_page(request, "django_qless/failed.html",
                       {"groups": groups[pager.offset:pager.offset + pager.per_page],
                        "pager": pager, "total": sum(g["count"] for g in groups),
                        "live_src": qurl(request, "api_failed")},
                       title="Failed jobs", crumbs=[("Failed", None)])


@dashboard_view()
def failed_group(request: HttpRequest, group: str) -> HttpResponse:
    """List one failure group's jobs, newest first."""
    client = client_for(request)
    total = int((client.jobs.failed() or {}).get(group, 0))
    if total == 0:
        raise Http404(f"There are no failed jobs in group {group!r}.")
    pager = get_pager(request, total=total)
    page = client.jobs.failed(group, start=pager.offset, limit=pager.per_page)
    now = float(client.now())
    rows = [job_row(job, now) for job in page.get("jobs", [])]
    context = {"group": group, "rows": rows, "pager": pager, "total": total,
               "bulk_limit": BULK_LIMIT,
               "live_src": qurl(request, "api_failed_group", group)
               + (f"?page={pager.number}" if pager.number > 1 else "")}
    return render_page(request, "django_qless/failed_group.html", context,
                       title=f"Failed: {group}",
                       crumbs=[("Failed", qurl(request, "failed")), (group, None)])


@dashboard_view(manage=True)
def failed_bulk(request: HttpRequest, group: str, action: str) -> HttpResponse:
    """Confirm (GET) then retry or cancel up to BULK_LIMIT jobs of a group (POST)."""
    client = client_for(request)
    page = client.jobs.failed(group, start=0, limit=BULK_LIMIT)
    jobs = list(page.get("jobs", []))
    total = int(page.get("total", 0))
    back = qurl(request, "failed_group", group) if total else qurl(request, "failed")
    if not jobs:
        messages.info(request, f"No failed jobs left in group {group}.")
        return redirect_back(request, qurl(request, "failed"))
    verb = "Retry" if action == "retry" else "Cancel"
    if request.method != "POST":
        by_queue: dict[str, int] = {}
        for job in jobs:
            by_queue[job.queue_name or "(none)"] = by_queue.get(job.queue_name or "(none)", 0) + 1
        details = [f"{n} from queue {q}" for q, n in sorted(by_queue.items())]
        question = (f"{verb} {len(jobs)} of the {total} failed jobs in group {group}?"
                    + (f" (at most {BULK_LIMIT} per request)" if total > BULK_LIMIT else ""))
        return render_page(
            request, "django_qless/confirm.html",
            {"action": qurl(request, f"failed_{action}", group), "question": question,
             "details": details, "button": f"Yes, {verb.lower()} {len(jobs)} jobs", "back": back},
            title=f"{verb} failed jobs",
            crumbs=[("Failed", qurl(request, "failed")), (group, back), (verb, None)])
    done, errors = 0, []
    if action == "cancel":
        try:
            client.jobs.cancel(*[job.jid for job in jobs])
            done = len(jobs)
        except QlessError as exc:
            errors.append(str(exc))
    else:
        for job in jobs:
            try:
                if job.queue_name:
                    job.move(job.queue_name)
                    done += 1
            except QlessError as exc:  # one bad job must not stop the rest
                errors.append(f"{job.jid}: {exc}")
    logger.info("user %s %s %d failed jobs of group %r", request.user, action, done, group)
    past = "Retried" if action == "retry" else "Canceled"
    messages.success(request, f"{past} {done} jobs of group {group}.")
    if errors:
        messages.error(request, f"{len(errors)} could not be changed: {errors[0]}")
    if total - done > 0:
        return redirect_back(request, qurl(request, "failed_group", group))
    return redirect_back(request, qurl(request, "failed"))
