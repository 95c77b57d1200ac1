"""Act on the jobs selected in a job list (checkboxes), then go back to that list."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.bulk import BULK_MAX, BulkResult
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.jobs import Jobs
from django_qless.forms import MoveForm, PriorityForm, first_error
from django_qless.views.base import counted, dashboard_view, qurl, redirect_back
from django_qless.views.job_state import MOVABLE, PRIORITY_STATES
from django_qless.views.shards import shard_clients

__all__ = ["ACTIONS", "jobs_bulk"]

# action -> (past tense for the message, what the form must also carry)
ACTIONS = {
    "cancel": "Canceled", "retry": "Retried", "move": "Moved", "priority": "Reprioritized",
    "track": "Tracked", "untrack": "Untracked",
}
SHOWN_REFUSALS = 10  # refused jids listed in the message; the rest are counted


def _report(request: HttpRequest, action: str, result: BulkResult, suffix: str = "") -> None:
    """Say what was done, and each refused jid with why, in plain words."""
    if result.done:
        messages.success(request, f"{ACTIONS[action]} {counted(len(result.done), 'job')}{suffix}.")
    if result.refused:
        items = list(result.refused.items())
        shown = "; ".join(f"{jid}: {why}" for jid, why in items[:SHOWN_REFUSALS])
        more = f" (and {len(items) - SHOWN_REFUSALS} more)" if len(items) > SHOWN_REFUSALS else ""
        level = messages.error if not result.done else messages.warning
        level(request,
              f"{counted(len(items), 'job')} not {ACTIONS[action].lower()}: {shown}{more}.")


def _by_shard(clients: list[Any], jids: list[str]) -> list[tuple[Any, list[str]]]:
    """Split `jids` by the shard holding each (unknown jids go to the first shard, which
    refuses them as missing)."""
    if len(clients) == 1:
        return [(clients[0], jids)]
    home: dict[str, Any] = {}
    for client in clients:
        missing = [j for j in jids if j not in home]
        if not missing:
            break
        for job in client.jobs.get_many(*missing):
            home.setdefault(job.jid, client)
    return [(client, mine) for client in clients
            if (mine := [j for j in jids if home.get(j, clients[0]) is client])]


def _run(request: HttpRequest, action: str, jids: list[str]) -> tuple[BulkResult, str] | str:
    """Run ``action`` on ``jids``, each in its own shard; return the result and a message
    suffix, or a refusal."""
    clients = shard_clients(request)
    parts = _by_shard(clients, jids)
    if len(parts) == 1:
        return _run_one(request, parts[0][0].jobs, action, parts[0][1])
    merged, suffix = BulkResult(), ""
    for client, mine in parts:
        got = _run_one(request, client.jobs, action, mine)
        if isinstance(got, str):
            return got
        merged.done.extend(got[0].done)
        merged.refused.update(got[0].refused)
        suffix = got[1]
    order = {jid: i for i, jid in enumerate(jids)}  # the order the jids were given
    merged.done.sort(key=lambda j: order.get(j, 0))
    return merged, suffix


def _run_one(request: HttpRequest, jobs: Jobs, action: str, jids: list[str]
             ) -> tuple[BulkResult, str] | str:
    """Run ``action`` on ``jids`` of one shard."""
    if action == "cancel":
        return jobs.cancel_many(jids), ""
    if action == "retry":
        return jobs.retry_many(jids), ""
    if action in ("track", "untrack"):
        return jobs.track_many(jids, track=action == "track"), ""
    if action == "move":
        move = MoveForm(request.POST)
        if not move.is_valid():
            return first_error(move)
        queue = move.cleaned_data["queue"]
        return jobs.move_many(jids, queue, states=MOVABLE), f" to {queue}"
    form = PriorityForm(request.POST)
    if not form.is_valid():
        return first_error(form)
    value = form.cleaned_data["priority"]
    return jobs.set_priority_many(jids, value, states=PRIORITY_STATES), f" to priority {value}"


@dashboard_view(post_only=True)
def jobs_bulk(request: HttpRequest) -> HttpResponse:
    """Cancel, retry, move, reprioritize, track or untrack the selected jobs (POST)."""
    back = redirect_back(request, qurl(request, "overview"))
    action = request.POST.get("action", "")
    jids = list(dict.fromkeys(j for j in request.POST.getlist("jid") if j))
    if action not in ACTIONS:
        messages.error(request, "Choose what to do with the selected jobs.")
        return back
    if not jids:
        messages.error(request, "Select at least one job first.")
        return back
    if len(jids) > BULK_MAX:
        messages.error(request, f"At most {BULK_MAX} jobs per request: {len(jids)} were "
                                "selected, nothing was changed.")
        return back
    try:
        outcome: Any = _run(request, action, jids)
    except InvalidArgument as exc:  # a malformed jid in the POST
        messages.error(request, f"Nothing was changed: {exc}.")
        return back
    if isinstance(outcome, str):
        messages.error(request, f"Nothing was changed: {outcome}")
        return back
    _report(request, action, *outcome)
    return back
