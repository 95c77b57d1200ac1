"""Throttles: every throttle the engine knows, look one up by id, set or delete one."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.client import Client
from django_qless.core.exceptions import InvalidArgument
from django_qless.core.throttle import ThrottleInfo, queue_throttle_id
from django_qless.forms import THROTTLE_ID_RE, THROTTLE_ID_RULE, ThrottleForm, first_error
from django_qless.views.base import (
    api_view,
    dashboard_view,
    logger,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.live_blocks import live_block, live_json
from django_qless.views.shards import deployment, is_sharded, page_clients, queue_client

__all__ = ["api_throttles", "throttle_delete", "throttle_info", "throttles"]


def throttle_info(client: Client, tids: list[str]) -> list[dict[str, Any]]:
    """Read several throttles in one round trip (maximum 0 = unlimited, ttl -2 = unset)."""
    return [_row(info) for info in client.throttles.get_many(tids)]


LIST_LIMIT = 1000  # throttles listed on the page (the engine keeps no index: a SCAN)


def _queue_of(tid: str) -> str | None:
    """Return the queue whose own throttle ``tid`` is, if it is one."""
    prefix = queue_throttle_id("")
    if not tid.startswith(prefix):
        return None
    return tid[len(prefix):] or None


def _row(info: ThrottleInfo) -> dict[str, Any]:
    return {"id": info.id, "maximum": info.maximum, "ttl": info.ttl}


def _owners(request: HttpRequest, tid: str) -> list[Client]:
    """Return the clients a throttle is set in: its queue's shard for a queue's throttle,
    else its home shard (InvalidArgument while a named throttle has none yet)."""
    queue = _queue_of(tid)
    if queue:
        return [queue_client(request, queue)]
    return [deployment(request).throttle_client(tid)]


@dashboard_view()
def throttles(request: HttpRequest) -> HttpResponse:
    """Show queue throttles and one looked-up throttle; POST sets a throttle."""
    clients = page_clients(request)
    if request.method == "POST":
        form = ThrottleForm(request.POST)
        if not form.is_valid():
            messages.error(request, first_error(form))
            return redirect_back(request, qurl(request, "throttles"))
        tid, maximum, ttl = (form.cleaned_data["id"], form.cleaned_data["maximum"],
                             form.cleaned_data["ttl"])
        for owner in _owners(request, tid):
            owner.throttles[tid].set(maximum, ttl)
        logger.info("user %s set throttle %s max=%s ttl=%s", request.user, tid, maximum, ttl)
        messages.success(request, f"Throttle {tid}: maximum {maximum}"
                         + (f", expires in {ttl}s." if ttl else "."))
        return redirect_back(request, qurl(request, "throttles"))
    listing = _listing(clients)
    lookup = None
    wanted = request.GET.get("id", "").strip()
    if wanted and not THROTTLE_ID_RE.fullmatch(wanted):
        messages.error(request, f"{wanted[:130]!r} is not a throttle id: use {THROTTLE_ID_RULE}.")
    elif wanted:
        try:
            owners = [c for c in _owners(request, wanted) if c in clients] or clients
        except InvalidArgument:  # a named throttle with no home shard yet: look everywhere
            owners = clients
        lookup = throttle_info(owners[0], [wanted])[0]
        lookup["locks"] = [j for c in owners for j in c.throttles[wanted].locks()][:100]
        lookup["pending"] = [j for c in owners for j in c.throttles[wanted].pending()][:100]
    initial = {"id": wanted} if wanted else {}
    return render_page(request, "django_qless/throttles.html",
                       {**listing, "sharded": is_sharded(clients),
                        "list_limit": LIST_LIMIT, "lookup": lookup, "wanted": wanted,
                        "form": ThrottleForm(initial=initial),
                        **live_block(request, "api_throttles", listing)},
                       title="Throttles", crumbs=[("Throttles", None)])


def _listing(clients: list[Client]) -> dict[str, Any]:
    """Return every throttle the engine knows (at most LIST_LIMIT rows) and whether more
    exist."""
    sharded = is_sharded(clients)
    listed = [(c, t) for c in clients for t in c.throttles.list(limit=LIST_LIMIT + 1)]
    rows = [{"id": t.id, "maximum": t.maximum, "ttl": t.ttl, "running": t.running,
             "pending": t.pending, "defined": t.defined, "queue": _queue_of(t.id),
             **({"shard": c.shard} if sharded else {})}
            for c, t in listed[:LIST_LIMIT]]
    return {"rows": rows, "truncated": len(listed) > LIST_LIMIT}


@api_view
def api_throttles(request: HttpRequest) -> HttpResponse:
    """Every throttle the engine knows (``rows``), whether more exist, and a version."""
    return live_json(_listing(page_clients(request)))


@dashboard_view(post_only=True)
def throttle_delete(request: HttpRequest, tid: str) -> HttpResponse:
    """Delete a throttle (jobs holding it keep running)."""
    owners = [c for c in _owners(request, tid) if c.throttles.get_many([tid])[0].defined]
    if not owners:
        messages.info(request, f"Throttle {tid} did not exist: nothing was deleted.")
        return redirect_back(request, qurl(request, "throttles"))
    for owner in owners:
        owner.throttles[tid].delete()
    logger.info("user %s deleted throttle %s", request.user, tid)
    messages.success(request, f"Deleted throttle {tid}.")
    return redirect_back(request, qurl(request, "throttles"))
