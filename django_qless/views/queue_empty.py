"""Empty or delete a queue that holds jobs: a confirmation that counts what goes, then
bounded batches, a few per request, continued by POST from a progress page."""

from __future__ import annotations

import json
import time

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.client import Client
from django_qless.core.console.queue_admin import EmptyCursor, EmptyStep, QueueContents
from django_qless.views.base import counted, dashboard_view, logger, qurl, render_page, user_of
from django_qless.views.shards import shard_clients

__all__ = ["BATCH", "REQUEST_SECONDS", "queue_empty"]

BATCH = 500  # jobs canceled per engine call
REQUEST_SECONDS = 2.0  # work per request before the progress page takes over
STATES = ("waiting", "scheduled", "depends", "throttled", "stalled", "running", "failed")


def _contents(clients: list[Client], name: str) -> QueueContents:
    """Sum what emptying would remove over every shard."""
    counts: dict[str, int] = {}
    capped = False
    for client in clients:
        part = client.queues[name].contents()
        capped = capped or part.failed_capped
        for state, n in part.counts.items():
            counts[state] = counts.get(state, 0) + n
    return QueueContents(counts, capped)


def _known(clients: list[Client], name: str) -> bool:
    return any(name in set(c.queues.names()) for c in clients)


def _read_progress(request: HttpRequest, shards: int) -> tuple[int, EmptyCursor, dict[str, int]]:
    """Read the shard position, cursor and running totals a progress page posted back."""
    try:
        at = min(max(int(request.POST.get("shard_at", "0")), 0), shards)
        totals = {str(k): max(int(v), 0)
                  for k, v in dict(json.loads(request.POST.get("totals") or "{}")).items()
                  if k in (*STATES, "recurring")}
    except (ValueError, TypeError):
        at, totals = 0, {}
    return at, EmptyCursor.loads(request.POST.get("cursor", "")), totals


def _add(totals: dict[str, int], step: EmptyStep) -> None:
    for state, n in step.canceled.items():
        totals[state] = totals.get(state, 0) + n
    if step.unrecurred:
        totals["recurring"] = totals.get("recurring", 0) + step.unrecurred


def _summary(totals: dict[str, int]) -> str:
    parts = [f"{totals[s]} {s}" for s in STATES if totals.get(s)]
    jobs = sum(totals.get(s, 0) for s in STATES)
    text = f"canceled {counted(jobs, 'job')}" + (f" ({', '.join(parts)})" if parts else "")
    if totals.get("recurring"):
        text += f" and removed {counted(totals['recurring'], 'recurring job template')}"
    return text


def _finish(request: HttpRequest, name: str, clients: list[Client], totals: dict[str, int],
            kept: dict[str, str], delete: bool) -> HttpResponse:
    """Report the outcome; forget the queue when asked and nothing was kept."""
    if kept:
        shown = "; ".join(f"{jid}: {why}" for jid, why in list(kept.items())[:10])
        messages.warning(request, f"{counted(len(kept), 'job')} kept in queue {name}: {shown}.")
    if delete and not kept:
        for client in clients:
            if name in set(client.queues.names()):
                client.queues[name].forget()
        messages.success(request, f"Deleted queue {name}: {_summary(totals)}.")
        return HttpResponseRedirect(qurl(request, "overview"))
    what = "Emptied" if not kept else "Emptied what could go from"
    note = " It was not deleted, since it still has jobs." if delete else ""
    messages.success(request, f"{what} queue {name}: {_summary(totals)}.{note}")
    return HttpResponseRedirect(qurl(request, "queue", name))


@dashboard_view(manage=True)
def queue_empty(request: HttpRequest, name: str) -> HttpResponse:
    """Confirm (GET) with what would go, then cancel it in batches (POST, continued)."""
    clients = shard_clients(request)
    if not _known(clients, name):
        messages.info(request, f"Queue {name} is not listed: nothing to empty.")
        return HttpResponseRedirect(qurl(request, "overview"))
    delete = request.POST.get("delete") == "1" or request.GET.get("delete") == "1"
    crumbs = [(name, qurl(request, "queue", name)), ("Delete" if delete else "Empty", None)]
    if request.method != "POST":
        contents = _contents(clients, name)
        return render_page(request, "django_qless/queue_empty.html",
                           {"queue": name, "contents": contents, "delete": delete,
                            "rows": [(s, contents.counts.get(s, 0))
                                     for s in (*STATES, "recurring")]},
                           title=f"{'Delete' if delete else 'Empty'} queue {name}?",
                           crumbs=crumbs)
    at, cursor, totals = _read_progress(request, len(clients))
    deadline = time.monotonic() + REQUEST_SECONDS
    while at < len(clients):  # at least one step per request, then until the deadline
        step = clients[at].queues[name].empty(batch=BATCH, cursor=cursor)
        _add(totals, step)
        cursor = step.cursor
        if step.done:  # this shard is empty: on to the next, keeping the kept jids
            at += 1
            cursor = EmptyCursor(kept=cursor.kept)
        if time.monotonic() >= deadline:
            break
    if at >= len(clients):
        logger.info("qless queue %s emptied by %s: %s", name, user_of(request), totals)
        return _finish(request, name, clients, totals, cursor.kept, delete)
    return render_page(request, "django_qless/queue_empty_progress.html",
                       {"queue": name, "delete": delete, "shard_at": at,
                        "cursor": cursor.dumps(), "totals": json.dumps(totals),
                        "summary": _summary(totals)},
                       title=f"Emptying queue {name}…", crumbs=crumbs)
