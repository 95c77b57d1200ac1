"""Act on every job a listing matches ("all 10,000 matching"), not only one page: a
confirmation that counts them, then bounded batches, a few per request, continued by POST
from a progress page."""

from __future__ import annotations

import json
import time
from typing import Any
from urllib.parse import urlencode

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict

from django_qless.core.client import Client
from django_qless.core.console.sweep import LISTED_STATES, Selection, sweep_step
from django_qless.core.exceptions import InvalidArgument
from django_qless.forms import FailedFilterForm, MoveForm, PriorityForm, first_error
from django_qless.views.base import counted, dashboard_view, logger, qurl, render_page, user_of
from django_qless.views.shards import queue_client, shard_clients

__all__ = ["BATCH", "REQUEST_SECONDS", "jobs_all"]

BATCH = 500  # jobs per batched core call
REQUEST_SECONDS = 2.0  # work per request before the progress page takes over
SHOWN_REFUSALS = 10
COUNT_SCAN = 20_000  # failure-group entries read to count a filtered group
LABELS = {"retry": "Retried", "cancel": "Canceled", "move": "Moved", "priority": "Reprioritized"}
SELECTION_FIELDS = ("queue", "state", "group", "since", "until")


def _selection(params: QueryDict) -> tuple[Selection, dict[str, str], str]:
    """Read the listing's selection; return it, its parameters and its page's title."""
    raw = {k: params.get(k, "").strip() for k in SELECTION_FIELDS if params.get(k, "").strip()}
    if "group" in raw:
        form = FailedFilterForm({k: raw.get(k, "") for k in ("queue", "since", "until")})
        if not form.is_valid():
            raise InvalidArgument(first_error(form))
        since, until = form.bounds()
        selection = Selection(group=raw["group"], queue=form.cleaned_data["queue"],
                              since=since, until=until)
        return selection, raw, f"failed jobs of group {raw['group']}"
    raw.pop("since", None)
    raw.pop("until", None)
    selection = Selection(queue=raw.get("queue"), state=raw.get("state"))
    return selection, raw, f"{raw['state']} jobs of queue {raw['queue']}"


def _clients(request: HttpRequest, selection: Selection) -> list[Client]:
    """A queue's listing lives in its shard; a failure group in every shard."""
    if selection.group is None:
        return [queue_client(request, str(selection.queue))]
    return shard_clients(request)


def _back(request: HttpRequest, selection: Selection, raw: dict[str, str]) -> str:
    """Return the listing the user came from."""
    if selection.group is not None:
        query: dict[str, str] = {k: raw[k] for k in ("queue", "since", "until") if k in raw}
        return qurl(request, "failed_group", selection.group, query=query or None)
    return qurl(request, "queue_tab", str(selection.queue), str(selection.state))


def _count(clients: list[Client], selection: Selection) -> tuple[int, bool]:
    """Count the matching jobs (a filtered group: up to COUNT_SCAN entries read)."""
    total, capped = 0, False
    for client in clients:
        if selection.group is None:
            total += int(client.queues[str(selection.queue)].counts.get(str(selection.state)) or 0)
            continue
        filtered = selection.queue or selection.since or selection.until
        if not filtered:
            total += int(client.jobs.failed(selection.group, 0, 0)["total"])
            continue
        position: int | None = 0
        budget = COUNT_SCAN
        while position is not None and budget > 0:
            page = client.jobs.failed_matching(
                selection.group, queue=selection.queue, since=selection.since,
                until=selection.until, cursor=position, count=500, scan=budget)
            total += len(page["jobs"])
            stop = page["next"]
            budget -= (stop if stop is not None else page["total"]) - position
            position = stop
        capped = capped or position is not None
    return total, capped


def _action(request: HttpRequest) -> tuple[str, dict[str, Any], str]:
    """Read the action and its argument from the POST; raise InvalidArgument if wrong."""
    action = request.POST.get("action", "")
    if action not in LABELS:
        raise InvalidArgument("Choose what to do with the matching jobs")
    if action == "move":
        # (the target is "target": "queue" is the selection's own queue)
        form: Any = MoveForm({"queue": request.POST.get("target", "")})
        if not form.is_valid():
            raise InvalidArgument(form.errors["queue"][0])
        return action, {"queue": form.cleaned_data["queue"]}, f" to {form.cleaned_data['queue']}"
    if action == "priority":
        form = PriorityForm(request.POST)
        if not form.is_valid():
            raise InvalidArgument(first_error(form))
        value = form.cleaned_data["priority"]
        return action, {"priority": value}, f" to priority {value}"
    return action, {}, ""


def _progress(request: HttpRequest, shards: int) -> tuple[int, int, dict[str, Any]]:
    try:
        at = min(max(int(request.POST.get("shard_at", "0")), 0), shards)
        position = max(int(request.POST.get("position", "0")), 0)
        raw = json.loads(request.POST.get("totals") or "{}")
        totals = {"done": max(int(raw.get("done", 0)), 0),
                  "refused": max(int(raw.get("refused", 0)), 0),
                  "why": {str(k)[:64]: str(v)[:300]
                          for k, v in dict(raw.get("why") or {}).items()}}
    except (ValueError, TypeError, AttributeError):
        at, position, totals = 0, 0, {"done": 0, "refused": 0, "why": {}}
    return at, position, totals


def _report(request: HttpRequest, action: str, suffix: str, totals: dict[str, Any]) -> None:
    label = LABELS[action]
    if totals["done"] or not totals["refused"]:
        messages.success(request, f"{label} {counted(totals['done'], 'job')}{suffix}.")
    if totals["refused"]:
        why = totals["why"]
        shown = "; ".join(f"{jid}: {text}" for jid, text in list(why.items())[:SHOWN_REFUSALS])
        more = totals["refused"] - min(len(why), SHOWN_REFUSALS)
        tail = f" (and {more} more)" if more > 0 else ""
        messages.warning(request, f"{counted(totals['refused'], 'job')} not {label.lower()}: "
                                  f"{shown}{tail}.")


@dashboard_view(manage=True)
def jobs_all(request: HttpRequest) -> HttpResponse:
    """Confirm (GET) with the number of matching jobs, then act on all of them (POST)."""
    params = request.POST if request.method == "POST" else request.GET
    try:
        selection, raw, title = _selection(params)
    except InvalidArgument as exc:
        messages.error(request, f"Nothing was changed: {exc}")
        return HttpResponseRedirect(qurl(request, "overview"))
    clients = _clients(request, selection)
    back = _back(request, selection, raw)
    crumbs: list[tuple[str, str | None]] = [(title.capitalize(), back), ("All matching", None)]
    if request.method != "POST":
        total, capped = _count(clients, selection)
        return render_page(request, "django_qless/jobs_all.html",
                           {"total": total, "capped": capped, "what": title,
                            "selection": raw, "back": back, "failed": selection.group is not None,
                            "priority_ok": selection.state in LISTED_STATES[1:]},
                           title=f"Act on all {title}", crumbs=crumbs)
    try:
        action, args, suffix = _action(request)
    except InvalidArgument as exc:
        messages.error(request, f"Nothing was changed: {exc}.")
        return HttpResponseRedirect(back)
    at, position, totals = _progress(request, len(clients))
    deadline = time.monotonic() + REQUEST_SECONDS
    while at < len(clients):  # at least one step per request, then until the deadline
        step = sweep_step(clients[at], selection, action, position=position, batch=BATCH,
                          **args)
        totals["done"] += len(step.result.done)
        totals["refused"] += len(step.result.refused)
        for jid, why in step.result.refused.items():
            if len(totals["why"]) < SHOWN_REFUSALS:
                totals["why"][jid] = why
        if step.position is None:
            at, position = at + 1, 0
        else:
            position = step.position
        if time.monotonic() >= deadline:
            break
    if at >= len(clients):
        logger.info("qless all-matching %s by %s on %s: %s", action, user_of(request), raw,
                    {k: totals[k] for k in ("done", "refused")})
        _report(request, action, suffix, totals)
        return HttpResponseRedirect(back)
    carried = {"target" if k == "queue" else k: str(v) for k, v in args.items()}
    hidden = {**raw, "action": action, **carried,
              "shard_at": str(at), "position": str(position), "totals": json.dumps(totals)}
    return render_page(request, "django_qless/jobs_all_progress.html",
                       {"hidden": sorted(hidden.items()), "what": title,
                        "label": LABELS[action], "totals": totals, "back": back,
                        "query": urlencode(raw)},
                       title=f"Acting on all {title}…", crumbs=crumbs)
