"""Recurring jobs: list across queues, edit schedule and options, cancel."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse

from django_qless.core.recurring import RecurringJob
from django_qless.forms import RecurringForm, first_error
from django_qless.views.base import (
    api_view,
    client_for,
    dashboard_view,
    get_pager,
    logger,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import Clients, as_clients, jobs_by_state, queue_counts
from django_qless.views.live_blocks import live_block, live_json
from django_qless.views.shards import page_clients

__all__ = ["api_recurring", "api_recurring_job", "recurring", "recurring_cancel",
           "recurring_detail", "recurring_row"]


def get_recurring(client: Clients, jid: str) -> RecurringJob:
    """Return the recurring job (from whichever shard holds it) or 404."""
    for shard in as_clients(client):
        found = shard.jobs.recurring(jid)
        if found is not None:
            return found
    raise Http404(f"There is no recurring job {jid!r}.")


def _listing(request: HttpRequest) -> tuple[list[dict[str, Any]], Any, int]:
    """Return one page of every queue's recurring jobs as rows, the pager and the total."""
    clients = page_clients(request)
    counts = [(q, q["recurring"]) for q in queue_counts(clients) if q["recurring"]]
    total = sum(n for _, n in counts)
    pager = get_pager(request, total=total)
    skip, want = pager.offset, pager.per_page
    jids: list[str] = []
    found: list[Any] = []
    for row, n in counts:
        if skip >= n:
            skip -= n
            continue
        take = min(want - len(jids), n - skip)
        name = row["name"]
        shard = next((c for c in clients if c.shard == row.get("shard", c.shard)), clients[0])
        page = jobs_by_state(shard, name, "recurring", skip, take)
        jids.extend(page)
        found.extend(shard.jobs.recurring(jid) for jid in page)
        skip = 0
        if len(jids) >= want:
            break
    now = float(clients[0].now())
    return [recurring_row(r, now) for r in found if r is not None], pager, total


def recurring_row(job: RecurringJob, now: float) -> dict[str, Any]:
    """Return what the pages show of a recurring job (``due``: its next run has passed)."""
    return {"jid": job.jid, "klass_name": job.klass_name, "queue_name": job.queue_name,
            "interval": job.interval, "next_run": job.next_run, "priority": job.priority,
            "retries": job.retries, "tags": list(job.tags or ()), "count": job.count,
            "due": float(job.next_run or 0) <= now}


@dashboard_view()
def recurring(request: HttpRequest) -> HttpResponse:
    """List every queue's recurring jobs, paginated across queues."""
    rows, pager, total = _listing(request)
    context = {"recurring": rows, "pager": pager, "total": total}
    context.update(live_block(request, "api_recurring", {"recurring": rows, "total": total}))
    return render_page(request, "django_qless/recurring.html", context,
                       title="Recurring jobs", crumbs=[("Recurring", None)])


@api_view
def api_recurring(request: HttpRequest) -> HttpResponse:
    """One page (``?page=``) of every queue's recurring jobs, the total and a version."""
    rows, _, total = _listing(request)
    return live_json({"recurring": rows, "total": total})


@dashboard_view()
def recurring_detail(request: HttpRequest, jid: str) -> HttpResponse:
    """Show a recurring job; POST (manage permission) updates it."""
    job = get_recurring(client_for(request), jid)
    if request.method == "POST":
        form = RecurringForm(request.POST)
        if not form.is_valid():
            messages.error(request, first_error(form))
            return redirect_back(request, qurl(request, "recurring_detail", jid))
        cleaned = form.cleaned_data
        old, new = set(job.tags or ()), set(cleaned["tags"])
        if ((job.priority, float(job.interval), job.retries, old)
                == (cleaned["priority"], float(cleaned["interval"]), cleaned["retries"], new)):
            messages.info(request, f"Recurring job {jid} already has these settings: nothing "
                                   "changed.")
            return redirect_back(request, qurl(request, "recurring_detail", jid))
        job.update(priority=cleaned["priority"], interval=cleaned["interval"],
                   retries=cleaned["retries"])
        if new - old:
            job.tag(*sorted(new - old))
        if old - new:
            job.untag(*sorted(old - new))
        logger.info("user %s updated recurring job %s", request.user, jid)
        messages.success(request, f"Updated recurring job {jid}.")
        return redirect_back(request, qurl(request, "recurring_detail", jid))
    form = RecurringForm(initial={"interval": job.interval, "priority": job.priority,
                                  "retries": job.retries, "tags": ", ".join(job.tags or ())})
    shown = _detail(job)
    return render_page(request, "django_qless/recurring_detail.html",
                       {"rj": job, "form": form, "due": shown["job"]["due"],
                        **live_block(request, "api_recurring_job", shown, jid)},
                       title=f"Recurring job {jid}",
                       crumbs=[("Recurring", qurl(request, "recurring")), (jid, None)])


def _detail(job: RecurringJob) -> dict[str, Any]:
    """Return what a recurring job's page shows: its row and its children's data."""
    return {"job": recurring_row(job, float(job.client.now())), "data": job.raw_data}


@api_view
def api_recurring_job(request: HttpRequest, jid: str) -> HttpResponse:
    """One recurring job (its row and data) and a version of its page."""
    return live_json(_detail(get_recurring(client_for(request), jid)))


@dashboard_view(manage=True)
def recurring_cancel(request: HttpRequest, jid: str) -> HttpResponse:
    """Confirm (GET) then stop a recurring job (POST); spawned jobs are kept."""
    job = get_recurring(client_for(request), jid)
    if request.method != "POST":
        return render_page(
            request, "django_qless/confirm.html",
            {"action": qurl(request, "recurring_cancel", jid),
             "question": f"Stop recurring job {jid} ({job.klass_name})? "
                         "Jobs it already spawned are kept.",
             "button": "Yes, stop it", "back": qurl(request, "recurring_detail", jid)},
            title="Cancel recurring job",
            crumbs=[("Recurring", qurl(request, "recurring")), (jid, None)])
    job.cancel()
    messages.success(request, f"Stopped recurring job {jid}.")
    return redirect_back(request, qurl(request, "recurring"))
