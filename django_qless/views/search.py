"""One search box: a jid goes to the job, a tag to its page, a class lists its jobs."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.console import KLASS_SCAN_CAP, KLASS_STATES, find_by_klass
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.job import Job
from django_qless.views.base import dashboard_view, qurl, render_page
from django_qless.views.data import job_row
from django_qless.views.shards import deployment, page_clients

__all__ = ["search"]

_JID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_QUEUE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]+")
RESULT_LIMIT = 100
# ?changed= choices: the job's last change (latest history entry) within this many seconds.
CHANGED = (("", "any time"), ("3600", "last hour"), ("86400", "last day"),
           ("604800", "last week"))


def _filters(request: HttpRequest, queues: list[str]
             ) -> tuple[list[str], str, str, list[str]]:
    """Read ?state=, ?queue=, ?changed=; return them and the problems (bad values dropped)."""
    problems = []
    changed = request.GET.get("changed", "")
    if changed not in dict(CHANGED):
        problems.append(f"Unknown time filter {changed!r}: searching any time.")
        changed = ""
    state = request.GET.get("state", "")
    states = list(KLASS_STATES)
    if state:
        if state in KLASS_STATES:
            states = [state]
        else:
            problems.append(f"Unknown state {state!r}: searching every state.")
    queue = request.GET.get("queue", "")
    if queue and (not _QUEUE.fullmatch(queue) or queue not in queues):
        problems.append(f"Unknown queue {queue!r}: searching every queue.")
        queue = ""
    return states, queue, changed, problems


def _has_jobs_tagged(clients: list[Any], text: str) -> bool:
    """Tell whether `text` is a tag some job (of any shard) carries (text that cannot be a
    tag: False)."""
    try:
        return any(int(c.jobs.tagged(text, 0, 1).get("total") or 0) > 0 for c in clients)
    except InvalidArgument:
        return False


@dashboard_view()
def search(request: HttpRequest) -> HttpResponse:
    """Find a job by jid, a tag, or the jobs of a class (a bounded scan; see docs/ui.md)."""
    clients = page_clients(request)
    q = request.GET.get("q", "").strip()
    queues = sorted({name for client in clients for name in client.queues.names()})
    states, queue, changed, problems = _filters(request, queues)
    filtered = len(states) < len(KLASS_STATES) or bool(queue) or bool(changed)
    context: dict[str, Any] = {
        "q": q, "states": KLASS_STATES, "state": states[0] if len(states) == 1 else "",
        "queues": queues, "queue": queue, "problems": problems, "rows": None,
        "changed_choices": CHANGED, "changed": changed,
        "scan_cap": KLASS_SCAN_CAP, "limit": RESULT_LIMIT, "capped": False, "kind": "",
    }
    crumbs: list[tuple[str, str | None]] = [("Search", None)]
    if not q:
        return render_page(request, "django_qless/search.html", context, title="Search",
                           crumbs=crumbs)
    if len(q) > 256 or not _PRINTABLE.fullmatch(q):
        context["problems"] = [*problems, "A search is 1 to 256 printable characters."]
        return render_page(request, "django_qless/search.html", context, title="Search",
                           crumbs=crumbs)
    # A bare jid is looked up in every shard (one round trip per primary).
    if not filtered and _JID.fullmatch(q) and isinstance(deployment(request).find_job(q), Job):
        return HttpResponseRedirect(qurl(request, "job", q))
    if not filtered and _has_jobs_tagged(clients, q):
        return HttpResponseRedirect(qurl(request, "tag", q))
    now = float(clients[0].now())
    jobs: list[Any] = []
    capped = False
    for client in clients:
        if queue and queue not in client.queues.names():
            continue
        found, stopped = find_by_klass(client, q, states=states,
                                       queues=[queue] if queue else None,
                                       limit=RESULT_LIMIT - len(jobs),
                                       since=now - float(changed) if changed else None)
        jobs.extend(found)
        capped = capped or stopped
        if len(jobs) >= RESULT_LIMIT:
            break
    context.update(rows=[job_row(j, now) for j in jobs], capped=capped, kind="class")
    return render_page(request, "django_qless/search.html", context,
                       title=f"Search: {q}", crumbs=crumbs)
