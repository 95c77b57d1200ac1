"""Run a recurring job now: put one job like its children, leaving its schedule as it is."""

from __future__ import annotations

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.core.console.recurring_run import run_recurring_now
from django_qless.views.base import dashboard_view, qurl, redirect_back
from django_qless.views.recurring import get_recurring
from django_qless.views.shards import shard_clients

__all__ = ["recurring_run"]


@dashboard_view(post_only=True)
def recurring_run(request: HttpRequest, jid: str) -> HttpResponse:
    """Put one job of recurring job `jid` now (POST); its next run is unchanged."""
    template = get_recurring(shard_clients(request), jid)
    put = run_recurring_now(template)
    messages.success(request, f"Put job {put} of recurring job {jid} into queue "
                              f"{template.queue_name} now; its schedule is unchanged.")
    return redirect_back(request, qurl(request, "recurring_detail", jid))
