"""One search box: a jid goes to the job, a tag to its page; otherwise the jobs whose class
contains the text or whose jid starts with it, a hundred a page."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.console import KLASS_SCAN_CAP, KLASS_STATES, find_jobs, search_match
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.job import Job
from django_qless.views.base import dashboard_view, qurl, render_page
from django_qless.views.data import job_row
from django_qless.views.shards import deployment, page_clients

if TYPE_CHECKING:
    from django_qless.core.client import Client

__all__ = ["search"]

_JID = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_QUEUE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f]+")
RESULT_LIMIT = 100  # matches a page
MAX_PAGES = 20  # a class search pages through at most this many (the scan is capped anyway)
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


def _tag_total(clients: list[Any], text: str) -> int:
    """Count the jobs tagged `text` over every shard (0 for text that cannot be a tag)."""
    try:
        return sum(int(c.jobs.tagged(text, 0, 0).get("total") or 0) for c in clients)
    except InvalidArgument:
        return 0


def _tagged_jids(client: Client, tag: str) -> Iterator[str]:
    """Yield a tag's jids on one shard, 500 a round trip, at most KLASS_SCAN_CAP."""
    offset = 0
    while offset < KLASS_SCAN_CAP:
        jids = client.jobs.tagged(tag, offset, 500).get("jobs") or []
        yield from jids
        offset += len(jids)
        if len(jids) < 500:
            return


def _exact_jid(request: HttpRequest, q: str) -> str | None:
    """Return the jid `q` names, as typed or in lower case (jids are lower-case hex)."""
    for jid in dict.fromkeys((q, q.lower())):
        if _JID.fullmatch(jid) and isinstance(deployment(request).find_job(jid), Job):
            return jid
    return None


def _page_number(request: HttpRequest) -> int:
    try:
        return max(1, min(int(request.GET.get("page", "1")), MAX_PAGES))
    except ValueError:
        return 1


def _excluded(clients: list[Any], tag: str) -> str:
    """Say in which states a tag's jobs are (what a state or queue filter left out)."""
    counts: Counter[str] = Counter()
    for client in clients:
        found, _ = find_jobs(client, lambda job: True, jids=_tagged_jids(client, tag),
                             limit=KLASS_SCAN_CAP)
        counts.update(str(job.state) for job in found)
    return ", ".join(f"{n} {state}" for state, n in sorted(counts.items()))


@dashboard_view()
def search(request: HttpRequest) -> HttpResponse:
    """Find a job by jid, a tag, or jobs by class or jid prefix (a bounded scan; see
    docs/ui.md)."""
    clients = page_clients(request)
    q = request.GET.get("q", "").strip()
    queues = sorted({name for client in clients for name in client.queues.names()})
    states, queue, changed, problems = _filters(request, queues)
    filtered = len(states) < len(KLASS_STATES) or bool(queue) or bool(changed)
    number = _page_number(request)
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
    jid = None if filtered else _exact_jid(request, q)
    if jid is not None:
        return HttpResponseRedirect(qurl(request, "job", jid))
    tagged = _tag_total(clients, q)
    if not filtered and tagged:
        return HttpResponseRedirect(qurl(request, "tag", q))
    now = float(clients[0].now())
    since = now - float(changed) if changed else None
    offset = (number - 1) * RESULT_LIMIT
    want = offset + RESULT_LIMIT + 1  # one more: is there a next page?
    jobs: list[Any] = []
    capped = False
    for client in clients:
        if queue and queue not in client.queues.names():
            continue
        if tagged:  # a tag with a filter: its jobs that pass the filter
            found, stopped = find_jobs(client, lambda job: True, states=states,
                                       queues=[queue] if queue else None, since=since,
                                       limit=want - len(jobs), jids=_tagged_jids(client, q))
        else:
            found, stopped = find_jobs(client, search_match(q), states=states,
                                       queues=[queue] if queue else None, since=since,
                                       limit=want - len(jobs))
        jobs.extend(found)
        capped = capped or stopped
        if len(jobs) >= want:
            break
    shown = jobs[offset:offset + RESULT_LIMIT]
    context.update(rows=[job_row(j, now) for j in shown], capped=capped,
                   kind="tag" if tagged else "class", tagged=tagged,
                   first=offset + 1, last=offset + len(shown), number=number,
                   prev_url=_page_url(request, number - 1) if number > 1 else None,
                   next_url=(_page_url(request, number + 1)
                             if len(jobs) > offset + RESULT_LIMIT and number < MAX_PAGES
                             else None),
                   more_than_pages=len(jobs) > offset + RESULT_LIMIT and number >= MAX_PAGES)
    if tagged and not shown:
        context["excluded"] = _excluded(clients, q)
    return render_page(request, "django_qless/search.html", context,
                       title=f"Search: {q}", crumbs=crumbs)


def _page_url(request: HttpRequest, number: int) -> str:
    query = request.GET.copy()
    query["page"] = str(number)
    return f"?{query.urlencode()}"
