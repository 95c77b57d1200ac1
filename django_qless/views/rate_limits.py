"""A queue's rate limit on its page: what it is, its use now, and the form that sets it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse

from django_qless.core.exceptions import InvalidArgument
from django_qless.forms import QueueRateLimitForm, first_error
from django_qless.views.base import dashboard_view, qurl, redirect_back
from django_qless.views.shards import queue_client

if TYPE_CHECKING:
    from django_qless.core.client import Client
    from django_qless.core.queue import Queue

__all__ = ["queue_rate_limit", "rate_limit_context"]


def _known_queue(client: Client, name: str) -> Queue:
    """Return the Queue of `client`, or 404 when the engine has never seen that name there."""
    if name not in set(client.queues.names()):
        raise Http404(f"There is no queue named {name!r}.")
    return client.queues[name]


def rate_limit_context(queue: Queue) -> dict[str, Any]:
    """Return the page's view of a queue's rate limit (None: no limit) and its form."""
    status = queue.rate_limit()
    initial = {"rate": status.rate, "key": status.key} if status is not None else {}
    return {"rate_limit": status, "rate_limit_form": QueueRateLimitForm(initial=initial)}


@dashboard_view(post_only=True)
def queue_rate_limit(request: HttpRequest, name: str) -> HttpResponse:
    """Set or remove a queue's rate limit."""
    queue = _known_queue(queue_client(request, name), name)
    back = qurl(request, "queue", name)
    form = QueueRateLimitForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return redirect_back(request, back)
    rate, key = form.cleaned_data["rate"], form.cleaned_data["key"]
    if rate is None:
        if queue.rate_limit() is None:
            messages.info(request, f"Queue {name} has no rate limit: nothing changed.")
        else:
            queue.clear_rate_limit()
            messages.success(request, f"Queue {name}: rate limit removed.")
        return redirect_back(request, back)
    try:
        queue.set_rate_limit(rate, key=key)
    except InvalidArgument as exc:
        messages.error(request, str(exc))
        return redirect_back(request, back)
    per = f" per {key}" if key else ""
    messages.success(request, f"Queue {name}: rate limit {rate}{per}.")
    return redirect_back(request, back)
