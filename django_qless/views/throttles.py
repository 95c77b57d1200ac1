"""Throttles: every throttle the engine knows, look one up by id, set or delete one."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.throttle import ThrottleInfo, queue_throttle_id
from django_qless.forms import ThrottleForm, first_error
from django_qless.views.base import (
    client_for,
    dashboard_view,
    logger,
    qurl,
    redirect_back,
    render_page,
)

__all__ = ["throttle_delete", "throttle_info", "throttles"]


def throttle_info(client: Any, tids: list[str]) -> list[dict[str, Any]]:
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


@dashboard_view()
def throttles(request: HttpRequest) -> HttpResponse:
    """Show queue throttles and one looked-up throttle; POST sets a throttle."""
    client = client_for(request)
    if request.method == "POST":
        form = ThrottleForm(request.POST)
        if not form.is_valid():
            messages.error(request, first_error(form))
            return redirect_back(request, qurl(request, "throttles"))
        tid, maximum, ttl = (form.cleaned_data["id"], form.cleaned_data["maximum"],
                             form.cleaned_data["ttl"])
        client.throttles[tid].set(maximum, ttl)
        logger.info("user %s set throttle %s max=%s ttl=%s", request.user, tid, maximum, ttl)
        messages.success(request, f"Throttle {tid}: maximum {maximum}"
                         + (f", expires in {ttl}s." if ttl else "."))
        return redirect_back(request, qurl(request, "throttles"))
    listed = client.throttles.list(limit=LIST_LIMIT + 1)
    rows = [{"id": t.id, "maximum": t.maximum, "ttl": t.ttl, "running": t.running,
             "pending": t.pending, "defined": t.defined, "queue": _queue_of(t.id)}
            for t in listed[:LIST_LIMIT]]
    lookup = None
    wanted = request.GET.get("id", "").strip()
    if wanted and len(wanted) <= 128:
        throttle = client.throttles[wanted]
        lookup = throttle_info(client, [wanted])[0]
        lookup["locks"] = throttle.locks()[:100]
        lookup["pending"] = throttle.pending()[:100]
    initial = {"id": wanted} if wanted else {}
    return render_page(request, "django_qless/throttles.html",
                       {"rows": rows, "truncated": len(listed) > LIST_LIMIT,
                        "list_limit": LIST_LIMIT, "lookup": lookup, "wanted": wanted,
                        "form": ThrottleForm(initial=initial)},
                       title="Throttles", crumbs=[("Throttles", None)])


@dashboard_view(post_only=True)
def throttle_delete(request: HttpRequest, tid: str) -> HttpResponse:
    """Delete a throttle (jobs holding it keep running)."""
    client = client_for(request)
    if not client.throttles.get_many([tid])[0].defined:
        messages.info(request, f"Throttle {tid} did not exist: nothing was deleted.")
        return redirect_back(request, qurl(request, "throttles"))
    client.throttles[tid].delete()
    logger.info("user %s deleted throttle %s", request.user, tid)
    messages.success(request, f"Deleted throttle {tid}.")
    return redirect_back(request, qurl(request, "throttles"))
