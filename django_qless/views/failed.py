"""Failure groups, one group's jobs, and retry-all / cancel-all with a confirmation page."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.utils import timezone

from django_qless.core.exceptions import QlessError
from django_qless.forms import FailedFilterForm, first_error
from django_qless.views.base import (
    PER_PAGE,
    counted,
    dashboard_view,
    get_pager,
    logger,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import failed_groups as merged_groups
from django_qless.views.data import job_row
from django_qless.views.shards import page_clients

__all__ = [
    "BULK_LIMIT",
    "failed_bulk",
    "failed_group",
    "failed_groups",
    "failed_retry_all",
    "group_newest",
    "group_snapshot",
]

BULK_LIMIT = 500  # jobs per request, like qless's retry-all
FILTER_FIELDS = ("queue", "since", "until")


def _groups(clients: list[Any]) -> list[dict[str, Any]]:
    failed = merged_groups(clients)
    rows = [{"group": str(g), "count": int(n)} for g, n in failed.items()]
    return sorted(rows, key=lambda r: (-r["count"], r["group"]))


def _newest(clients: list[Any], groups: list[str]) -> dict[str, Any]:
    """Return each group's newest failed job over every shard."""
    newest: dict[str, Any] = {}
    for client in clients:
        for group, job in client.jobs.failed_newest(groups).items():
            if job is None:
                continue
            when = float((job.failure or {}).get("when") or 0)
            seen = newest.get(group)
            if seen is None or when > float((seen.failure or {}).get("when") or 0):
                newest[group] = job
    return newest


def group_newest(clients: list[Any], group: str) -> Any:
    """Return a group's newest failed job over every shard (None if it has none)."""
    return _newest(clients, [group]).get(group)


def group_snapshot(total: int, newest: Any) -> str:
    """Describe what a failure group's page shows: it changes whenever the page would."""
    text = counted(total, "failed job")
    return f"{text}, the newest {newest.jid}" if newest is not None else text


def _group_page(clients: list[Any], group: str, offset: int, count: int) -> list[Any]:
    """Return one page of a group's failed jobs, the shards' lists one after the other."""
    if len(clients) == 1:
        return list(clients[0].jobs.failed(group, start=offset, limit=count).get("jobs", []))
    jobs: list[Any] = []
    for client in clients:
        total = int((client.jobs.failed() or {}).get(group, 0))
        if offset >= total:
            offset -= total
            continue
        page = client.jobs.failed(group, start=offset, limit=count - len(jobs))
        jobs.extend(page.get("jobs", []))
        offset = 0
        if len(jobs) >= count:
            break
    return jobs


@dashboard_view()
def failed_groups(request: HttpRequest) -> HttpResponse:
    """List failure groups with their counts and each group's newest failure."""
    clients = page_clients(request)
    groups = _groups(clients)
    pager = get_pager(request, total=len(groups))
    shown = groups[pager.offset:pager.offset + pager.per_page]
    newest = _newest(clients, [g["group"] for g in shown]) if shown else {}
    now = float(clients[0].now())
    for row in shown:
        job = newest.get(row["group"])
        row["sample"] = job_row(job, now) if job is not None else None
    total = sum(g["count"] for g in groups)
    return render_page(request, "django_qless/failed.html",
                       {"groups": shown, "pager": pager, "total": total,
                        "group_count": len(groups),
                        "live_src": qurl(request, "api_failed", query={
                            k: v for k, v in request.GET.items() if k == "shard"})},
                       title="Failed jobs", crumbs=[("Failed", None)])


def _filter_form(request: HttpRequest) -> FailedFilterForm:
    """Bind the filter form when the querystring carries one of its fields."""
    bound = any(request.GET.get(name) for name in FILTER_FIELDS)
    form = FailedFilterForm(request.GET if bound else None)
    if bound and not form.is_valid():
        messages.error(request, f"Filter not applied: {first_error(form)}")
    return form


def _cursor(request: HttpRequest, clients: list[Any]) -> tuple[int, int]:
    """Read ``?after=``: (index of the shard to read from, cursor in it). A sharded
    deployment's cursor is ``<shard>:<n>``, a single server's a bare number."""
    text = request.GET.get("after", "0")
    shard, _, number = text.rpartition(":")
    start = next((i for i, c in enumerate(clients) if shard and c.shard == shard), 0)
    try:
        return start, max(0, int(number))
    except ValueError:
        return 0, 0


def _filtered(request: HttpRequest, clients: list[Any], group: str, form: FailedFilterForm
              ) -> dict[str, Any]:
    """Return the context of one filtered page: matching jobs from the ``after`` cursor,
    through the shards one after the other."""
    start, cursor = _cursor(request, clients)
    since, until = form.bounds()
    jobs: list[Any] = []
    after: str | None = None
    try:
        for index in range(start, len(clients)):
            client = clients[index]
            reply = client.jobs.failed_matching(
                group, queue=form.cleaned_data["queue"], since=since, until=until,
                cursor=cursor if index == start else 0, count=PER_PAGE - len(jobs))
            jobs.extend(reply["jobs"])
            if reply["next"] is not None:
                after = (str(reply["next"]) if len(clients) == 1
                         else f"{client.shard}:{reply['next']}")
                break
            if len(jobs) >= PER_PAGE:
                if index + 1 < len(clients):
                    after = f"{clients[index + 1].shard}:0"
                break
    except QlessError as exc:
        messages.error(request, f"Filter not applied: {exc}")
        jobs, after = [], None
    query = {k: request.GET[k] for k in (*FILTER_FIELDS, "shard") if request.GET.get(k)}
    base = qurl(request, "failed_group", group)
    moved = start > 0 or cursor > 0
    return {"jobs": jobs, "filtered": True, "first_url": qurl(
                request, "failed_group", group, query=query) if moved else None,
            "next_url": None if after is None else qurl(
                request, "failed_group", group, query={**query, "after": after}),
            "clear_url": base}


@dashboard_view()
def failed_group(request: HttpRequest, group: str) -> HttpResponse:
    """List one failure group's jobs, newest first; filter them by queue and day."""
    clients = page_clients(request)
    total = int(merged_groups(clients).get(group, 0))
    if total == 0:
        raise Http404(f"There are no failed jobs in group {group!r}.")
    form = _filter_form(request)
    now = float(clients[0].now())
    newest = _newest(clients, [group]).get(group)
    context: dict[str, Any] = {"group": group, "total": total, "bulk_limit": BULK_LIMIT,
                               "sample": job_row(newest, now) if newest else None,
                               "filter_form": form, "zone": timezone.get_current_timezone_name()}
    if form.active:
        # Filtered pages follow a cursor, and live refresh (unfiltered rows) is off.
        context.update(_filtered(request, clients, group, form))
        context["rows"] = [job_row(job, now) for job in context.pop("jobs")]
    else:
        pager = get_pager(request, total=total)
        page = _group_page(clients, group, pager.offset, pager.per_page)
        live = {k: v for k, v in request.GET.items() if k == "shard"}
        if pager.number > 1:
            live["page"] = str(pager.number)
        # Heading, newest failure and rows are one snapshot; live refresh says when the
        # group changed (as the Failed page does) rather than swap rows under a stale heading.
        context.update(rows=[job_row(job, now) for job in page], pager=pager,
                       snapshot=group_snapshot(total, newest),
                       live_src=qurl(request, "api_failed_group", group, query=live))
    return render_page(request, "django_qless/failed_group.html", context,
                       title=f"Failed: {group}",
                       crumbs=[("Failed", qurl(request, "failed")), (group, None)])


@dashboard_view(manage=True)
def failed_bulk(request: HttpRequest, group: str, action: str) -> HttpResponse:
    """Confirm (GET) then retry or cancel up to BULK_LIMIT jobs of a group (POST)."""
    clients = page_clients(request)
    jobs = _group_page(clients, group, 0, BULK_LIMIT)
    total = int(merged_groups(clients).get(group, 0))
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
        question = (f"{verb} {len(jobs)} of the {counted(total, 'failed job')} in group {group}?"
                    + (f" (at most {BULK_LIMIT} per request)" if total > BULK_LIMIT else ""))
        return render_page(
            request, "django_qless/confirm.html",
            {"action": qurl(request, f"failed_{action}", group), "question": question,
             "details": details, "back": back,
             "button": f"Yes, {verb.lower()} {counted(len(jobs), 'job')}"},
            title=f"{verb} failed jobs",
            crumbs=[("Failed", qurl(request, "failed")), (group, back), (verb, None)])
    done, errors = 0, []
    if action == "cancel":
        for client in clients:  # each shard cancels its own jobs
            mine = [job.jid for job in jobs if job.client is client]
            if not mine:
                continue
            try:
                client.jobs.cancel(*mine)
                done += len(mine)
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
    messages.success(request, f"{past} {counted(done, 'job')} of group {group}.")
    if errors:
        messages.error(request, f"{len(errors)} could not be changed: {errors[0]}")
    if total - done > 0:
        return redirect_back(request, qurl(request, "failed_group", group))
    return redirect_back(request, qurl(request, "failed"))


@dashboard_view(manage=True)
def failed_retry_all(request: HttpRequest) -> HttpResponse:
    """Confirm (GET) then retry failed jobs of every group, at most BULK_LIMIT per POST."""
    clients = page_clients(request)
    groups = _groups(clients)
    total = sum(g["count"] for g in groups)
    back = qurl(request, "failed")
    if total == 0:
        messages.info(request, "There are no failed jobs: nothing to retry.")
        return redirect_back(request, back)
    batch = min(total, BULK_LIMIT)
    if request.method != "POST":
        question = (f"Retry {'the' if total == 1 else 'all'} {counted(total, 'failed job')} "
                    f"of {counted(len(groups), 'failure group')}?" if total <= BULK_LIMIT else
                    f"Retry {batch} of the {counted(total, 'failed job')} "
                    f"({counted(len(groups), 'group')})? "
                    f"At most {BULK_LIMIT} are retried per request: run it again for the rest.")
        return render_page(
            request, "django_qless/confirm.html",
            {"action": qurl(request, "failed_retry_all"), "question": question,
             "details": [f"{g['count']} in {g['group']}" for g in groups[:20]]
             + ([f"… and {counted(len(groups) - 20, 'more group')}"] if len(groups) > 20 else []),
             "button": f"Yes, retry {counted(batch, 'job')}", "back": back},
            title="Retry all failed jobs",
            crumbs=[("Failed", back), ("Retry all", None)])
    retried = 0
    refused: dict[str, str] = {}
    for client in clients:  # each shard retries its own jobs, BULK_LIMIT in all
        jids: list[str] = []
        here = client.jobs.failed() or {}
        for group in (g["group"] for g in groups if g["group"] in here):
            if retried + len(jids) >= BULK_LIMIT:
                break
            reply = client.jobs.failed(group, start=0, limit=BULK_LIMIT - retried - len(jids))
            jids.extend(job.jid for job in reply.get("jobs", []))
        if jids:
            result = client.jobs.retry_many(jids)
            retried += len(result.done)
            refused.update(result.refused)
    logger.info("user %s retried %d failed jobs of all groups", request.user, retried)
    messages.success(request, f"Retried {counted(retried, 'failed job')}.")
    if refused:
        jid, why = next(iter(refused.items()))
        messages.warning(request, f"{len(refused)} could not be retried ({jid}: {why}).")
    remaining = sum(merged_groups(clients).values())
    if remaining:
        messages.info(request, f"{counted(remaining, 'more failed job')} "
                               f"{'remains' if remaining == 1 else 'remain'}: run “Retry all” "
                               f"again.")
    return redirect_back(request, back)
