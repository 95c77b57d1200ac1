"""Throttles: every queue's throttle, look one up by id, set or delete one."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

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


def _decode(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    return value if isinstance(value, dict) else {}


def throttle_info(client: Any, tids: list[str]) -> list[dict[str, Any]]:
    """Read several throttles in one round trip (maximum 0 = unlimited, ttl -2 = unset)."""
    if not tids:
        return []
    replies = client.pipeline_calls([("throttle.get", (tid,)) for tid in tids])
    rows = []
    for tid, reply in zip(tids, replies, strict=True):
        info = _decode(reply)
        ttl = info.get("ttl")
        rows.append({"id": tid, "maximum": int(info.get("maximum") or 0),
                     "ttl": int(ttl) if ttl is not None else -2})
    return rows


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
        client.call("throttle.set", tid, maximum, ttl)
        logger.info("user %s set throttle %s max=%s ttl=%s", request.user, tid, maximum, ttl)
        messages.success(request, f"Throttle {tid}: maximum {maximum}"
                         + (f", expires in {ttl}s." if ttl else "."))
        return redirect_back(request, qurl(request, "throttles"))
    names = list(client.queues.names())
    queue_rows = []
    for name, row in zip(names, throttle_info(client, [f"ql:q:{n}" for n in names]),
                         strict=True):
        if row["ttl"] != -2 or row["maximum"]:  # only queues that have a throttle
            row["queue"] = name
            queue_rows.append(row)
    lookup = None
    wanted = request.GET.get("id", "").strip()
    if wanted and len(wanted) <= 128:
        lookup = throttle_info(client, [wanted])[0]
        lookup["locks"] = list(client.call("throttle.locks", wanted) or [])[:100]
        lookup["pending"] = list(client.call("throttle.pending", wanted) or [])[:100]
    initial = {"id": wanted} if wanted else {}
    return render_page(request, "django_qless/throttles.html",
                       {"queue_rows": queue_rows, "lookup": lookup, "wanted": wanted,
                        "form": ThrottleForm(initial=initial)},
                       title="Throttles", crumbs=[("Throttles", None)])


@dashboard_view(post_only=True)
def throttle_delete(request: HttpRequest, tid: str) -> HttpResponse:
    """Delete a throttle (jobs holding it keep running)."""
    client_for(request).call("throttle.delete", tid)
    logger.info("user %s deleted throttle %s", request.user, tid)
    messages.success(request, f"Deleted throttle {tid}.")
    return redirect_back(request, qurl(request, "throttles"))
