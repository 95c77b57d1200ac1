"""A flow's page: its members with their states, parents and results; retry and cancel."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect

from django_qless.core.exceptions import InvalidArgument
from django_qless.core.flows import Flows, FlowState, member_ids
from django_qless.views.base import counted, dashboard_view, qurl, render_page
from django_qless.views.shards import deployment

__all__ = ["flow_cancel", "flow_detail", "flow_retry"]


def _flows(request: HttpRequest, flow_id: str) -> tuple[Flows, FlowState | None]:
    """Return the alias's flows and this flow's state (None: no member is left)."""
    try:
        member_ids(flow_id)
    except InvalidArgument:
        raise Http404(f"{flow_id} is not a flow id") from None
    flows = Flows(deployment(request))
    return flows, flows.get(flow_id)


def _shown(value: Any) -> str:
    """Render a result as short JSON text (escaped by the template)."""
    text = json.dumps(value, default=str)
    return text if len(text) <= 200 else text[:199] + "…"


@dashboard_view()
def flow_detail(request: HttpRequest, flow_id: str) -> HttpResponse:
    """Show every member of a flow in order: jid (linked), class, queue, state, result."""
    _, state = _flows(request, flow_id)
    if state is None:
        return render_page(request, "django_qless/flow.html", {"flow_id": flow_id, "gone": True},
                           title=f"Flow {flow_id}", crumbs=[(f"Flow {flow_id}", None)])
    rows = [{
        "jid": m.jid, "klass": m.klass, "queue": m.queue, "state": m.state or "gone",
        "url": qurl(request, "job", m.jid) if m.state else None,
        "parents": [p.rpartition("-")[2] for p in m.parents],
        "result": _shown(m.result) if m.state == "complete" else "",
        "failure": (m.failure or {}).get("group", "") if m.state == "failed" else "",
    } for m in state.members]
    return render_page(request, "django_qless/flow.html",
                       {"flow": state, "flow_id": flow_id, "rows": rows,
                        "retry_url": qurl(request, "flow_retry", flow_id),
                        "cancel_url": qurl(request, "flow_cancel", flow_id)},
                       title=f"Flow {flow_id}", crumbs=[(f"Flow {flow_id}", None)])


@dashboard_view(manage=True, post_only=True)
def flow_retry(request: HttpRequest, flow_id: str) -> HttpResponse:
    """Put the flow's failed members back in their queues."""
    flows, _ = _flows(request, flow_id)
    done = flows.retry(flow_id)
    messages.success(request, f"Retried {counted(len(done), 'failed member')}.")
    return HttpResponseRedirect(qurl(request, "flow", flow_id))


@dashboard_view(manage=True, post_only=True)
def flow_cancel(request: HttpRequest, flow_id: str) -> HttpResponse:
    """Cancel every member of the flow that is not complete."""
    flows, _ = _flows(request, flow_id)
    done = flows.cancel(flow_id)
    messages.success(request, f"Canceled {counted(len(done), 'member')}.")
    return HttpResponseRedirect(qurl(request, "flow", flow_id))
