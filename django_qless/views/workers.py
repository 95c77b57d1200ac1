"""Workers with liveness (live, draining, stale, dead); one worker; quiet, stop, forget."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse

from django_qless.core.client import Client
from django_qless.core.job import Job
from django_qless.views.base import (
    api_view,
    dashboard_view,
    get_pager,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.data import (
    Clients,
    as_clients,
    job_row,
    load_jobs,
    state_summary,
    worker_counts,
)
from django_qless.views.shards import page_clients, shard_clients

__all__ = ["api_workers_info", "utc_text", "worker_detail",
           "worker_forget", "worker_quiet", "worker_rows", "worker_stop", "workers"]


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


def _merged_info(clients: list[Client], names: tuple[str, ...]) -> list[dict[str, Any]]:
    """Return every shard's worker info joined by name: the latest contact, the summed
    counts, every queue (a worker serving queues of several shards reports to each)."""
    merged: dict[str, dict[str, Any]] = {}
    for client in clients:
        for info in client.workers.info(*names):
            seen = merged.get(info["name"])
            if seen is None:
                merged[info["name"]] = dict(info)
                continue
            if (info["last_seen"] or 0) > (seen["last_seen"] or 0):
                seen.update(last_seen=info["last_seen"], host=info["host"] or seen["host"],
                            pid=info["pid"] if info["pid"] is not None else seen["pid"],
                            state=info["state"], beat=info["beat"] or seen["beat"])
            seen["request"] = seen["request"] or info["request"]
            starts = [s for s in (seen["started"], info["started"]) if s]
            seen["started"] = min(starts) if starts else None
            seen["queues"] = [*seen["queues"],
                              *(q for q in info["queues"] if q not in seen["queues"])]
            seen["done"] += info["done"]
            seen["failed"] += info["failed"]
    rows = list(merged.values())
    if len(clients) > 1:
        rows.sort(key=lambda row: -(row["last_seen"] or 0))
    return rows


def worker_rows(clients: Clients, *names: str) -> list[dict[str, Any]]:
    """Join the engine's per-worker counts and info into rows (all workers, or `names`),
    over every shard."""
    shards = as_clients(clients)
    now = float(shards[0].now())
    counts = {str(w["name"]): w for w in worker_counts(shards)}
    rows = []
    for info in _merged_info(shards, names):
        name = info["name"]
        if names and info["last_seen"] is None:
            continue  # not (or no longer) a known worker
        held = counts.get(name, {})
        seen = info["last_seen"]
        age = (now - seen) if seen is not None else None
        beat = info["beat"] or 60.0
        rows.append({
            "name": name, "host": info["host"] or "", "pid": info["pid"],
            "queues": info["queues"], "jobs": int(held.get("jobs", 0) or 0),
            "stalled": int(held.get("stalled", 0) or 0), "done": info["done"],
            "failed": info["failed"], "started": info["started"], "last_seen": seen,
            "started_text": utc_text(info["started"]), "last_seen_text": utc_text(seen),
            "last_seen_ago": _ago(age), "state": info["state"],
            "stale": info["state"] in ("stale", "dead"), "request": info["request"],
            "request_text": f"{info['request']} asked" if info["request"] else "",
            "beat": beat, "stale_after": beat * 1.5, "dead_after": beat * 3,
        })
    return rows


@dashboard_view()
def workers(request: HttpRequest) -> HttpResponse:
    """List workers with liveness, most recently seen first."""
    clients = page_clients(request)
    rows = worker_rows(clients)
    pager = get_pager(request, total=len(rows))
    return render_page(request, "django_qless/workers.html",
                       {"workers": rows[pager.offset:pager.offset + pager.per_page],
                        "pager": pager, "total": len(rows), "summary": state_summary(rows),
                        # Live rows only when everything fits on one page.
                        "live": not (pager.has_previous or pager.has_next),
                        "live_src": qurl(request, "api_workers_info", query={
                            k: v for k, v in request.GET.items() if k == "shard"})},
                       title="Workers", crumbs=[("Workers", None)])


def _since(job: Job) -> float | None:
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
    clients = shard_clients(request)
    running: list[str] = []
    stalled: list[str] = []
    for client in clients:
        held = client.workers[name] or {}
        running.extend(held.get("jobs") or [])
        stalled.extend(held.get("stalled") or [])
    row = next(iter(worker_rows(clients, name)), None)
    if row is None and not running and not stalled:
        raise Http404(f"No worker named {name!r} has been seen recently.")
    now = float(clients[0].now())
    current = []
    for job in load_jobs(clients, running):
        item = job_row(job, now)
        item["since"] = _since(job)
        item["for"] = (now - item["since"]) if item["since"] else None
        current.append(item)
    return render_page(request, "django_qless/worker.html",
                       {"name": name, "worker": row, "current": current,
                        "stalled": [job_row(j, now) for j in load_jobs(clients, stalled)]},
                       title=f"Worker {name}",
                       crumbs=[("Workers", qurl(request, "workers")), (name, None)])


@dashboard_view(manage=True)
def worker_forget(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm (GET), then forget a worker (POST): its entry and info, not its jobs."""
    if not worker_rows(shard_clients(request), name):
        messages.info(request, f"Worker {name} is not known (already forgotten, or never "
                               f"registered): nothing to forget.")
        return HttpResponseRedirect(qurl(request, "workers"))
    if request.method != "POST":
        return render_page(request, "django_qless/worker_forget.html", {"name": name},
                           title=f"Forget worker {name}?",
                           crumbs=[("Workers", qurl(request, "workers")),
                                   (name, qurl(request, "worker", name)), ("Forget", None)])
    for client in shard_clients(request):  # a worker registers in every shard it serves
        client.workers.deregister(name)
    messages.success(request, f"Forgot worker {name}. Jobs it still holds stay until their "
                              f"locks expire.")
    return redirect_back(request, qurl(request, "workers"))


_ASKED = {
    "quiet": ("Quiet worker {name}? It finishes the jobs it runs, takes no new ones and exits "
              "(as on QUIT). A forking worker does so with all its children.",
              "Yes, make it quiet",
              "Asked worker {name} to be quiet: it finishes its running jobs, takes no new ones "
              "and exits."),
    "stop": ("Stop worker {name} now? It gives its running jobs back to their queues and "
             "exits (as on TERM). A forking worker does so with all its children.",
             "Yes, stop the worker",
             "Asked worker {name} to stop: it gives its running jobs back and exits."),
}


def _ask(request: HttpRequest, name: str, action: str) -> HttpResponse:
    """Confirm (GET), then ask a live worker to be quiet or to stop (POST)."""
    back = qurl(request, "worker", name)
    row = next(iter(worker_rows(shard_clients(request), name)), None)
    if row is None or row["state"] == "dead":
        why = "is not known" if row is None else "is dead (no contact for a while)"
        messages.info(request, f"Worker {name} {why}: nothing to ask.")
        return redirect_back(request, back, use_referer=True)
    question, button, done = _ASKED[action]
    if request.method != "POST":
        return render_page(request, "django_qless/confirm.html", {
            "question": question.format(name=name), "button": button, "back": back,
            "action": qurl(request, f"worker_{action}", name),
            "hidden": [("next", request.GET.get("next", ""))] if request.GET.get("next") else [],
        }, title=f"{action.capitalize()} worker {name}?",
            crumbs=[("Workers", qurl(request, "workers")), (name, back),
                    (action.capitalize(), None)])
    asked = 0
    for client in shard_clients(request):  # a worker registers in every shard it serves
        if client.workers.info(name):
            client.workers.request(name, action)
            asked += 1
    if not asked:
        messages.info(request, f"Worker {name} is not known: nothing to ask.")
    else:
        messages.success(request, done.format(name=name))
    return redirect_back(request, back)


@dashboard_view(manage=True)
def worker_quiet(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm, then ask a worker to finish its jobs, take no new ones and exit (QUIT)."""
    return _ask(request, name, "quiet")


@dashboard_view(manage=True)
def worker_stop(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm, then ask a worker to give its jobs back and exit (TERM)."""
    return _ask(request, name, "stop")


@api_view
def api_workers_info(request: HttpRequest) -> HttpResponse:
    """Return the workers page's rows as JSON (what its live refresh polls)."""
    rows = worker_rows(page_clients(request))
    return JsonResponse({"workers": rows, "total": len(rows), "summary": state_summary(rows)})
