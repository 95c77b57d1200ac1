"""Queue pages: counts, stats and histograms, per-state job tabs, pause and settings."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse

from django_qless.core.client import Client
from django_qless.core.queue import Queue
from django_qless.forms import QueueSettingsForm, StatsDateForm, first_error
from django_qless.views import data
from django_qless.views.base import (
    dashboard_view,
    get_pager,
    qurl,
    redirect_back,
    render_page,
)
from django_qless.views.rate_limits import rate_limit_context
from django_qless.views.recurring import recurring_row
from django_qless.views.shards import queue_client

__all__ = ["queue_detail", "queue_pause", "queue_settings", "queue_tab", "queue_unpause"]


def known_queue(client: Client, name: str) -> Queue:
    """Return the Queue of `client` (the queue's shard), or 404 when the engine has never
    seen that name there."""
    if name not in set(client.queues.names()):
        raise Http404(f"There is no queue named {name!r}.")
    return client.queues[name]


def _counts(client: Client, name: str) -> dict[str, Any]:
    for row in data.queue_counts([client]):
        if row["name"] == name:
            return row
    return {"name": name, **{k: 0 for k in data.QUEUE_STATES}, "paused": False}


def _tabs(request: HttpRequest, name: str, counts: dict[str, Any]) -> list[dict[str, Any]]:
    from django_qless.views.queue_failed import failed_tab

    return [*({"state": s, "count": counts.get(s, 0), "url": qurl(request, "queue_tab", name, s)}
              for s in data.QUEUE_STATES), failed_tab(request, name)]


@dashboard_view()
def queue_detail(request: HttpRequest, name: str) -> HttpResponse:
    """Show a queue's counts, settings and the statistics of a chosen day."""
    client = queue_client(request, name)
    queue = known_queue(client, name)
    counts = _counts(client, name)
    form = StatsDateForm(request.GET or None)
    today = day = dt.datetime.fromtimestamp(float(client.now()), tz=dt.UTC).date()
    if form.is_bound and form.is_valid() and form.cleaned_data.get("date"):
        day = form.cleaned_data["date"]
    elif form.is_bound and not form.is_valid():
        messages.warning(request, f"{first_error(form)} Showing today instead.")
    if day > today:
        messages.info(request, f"{day:%Y-%m-%d} has not begun yet (UTC): showing today.")
        day = today
    stats = data.stats_for_day(client, name, day)
    settings = queue.settings()
    settings_form = QueueSettingsForm(initial={
        "heartbeat": settings.heartbeat,
        "max_concurrency": settings.max_concurrency,
        "throttle": settings.throttle.maximum,
    })
    context = {
        "queue": name, "counts": counts, "stats": stats, "day": day,
        "prev_day": day - dt.timedelta(days=1),
        "next_day": day + dt.timedelta(days=1) if day < today else None,  # never the future
        "tabs": _tabs(request, name, counts), "settings_form": settings_form,
        "queue_shard": client.shard,
    }
    context.update(rate_limit_context(queue))
    return render_page(request, "django_qless/queue.html", context, title=f"Queue {name}",
                       crumbs=[(name, None)])


@dashboard_view()
def queue_tab(request: HttpRequest, name: str, state: str) -> HttpResponse:
    """List one state's jobs of a queue, paginated."""
    client = queue_client(request, name)
    known_queue(client, name)
    counts = _counts(client, name)
    pager = get_pager(request, total=int(counts.get(state, 0)))
    jids = data.jobs_by_state(client, name, state, pager.offset, pager.per_page)
    now = float(client.now())
    if state == "recurring":
        rows: list[dict[str, Any]] = []
        recurring = [client.jobs.recurring(jid) for jid in jids]
        context: dict[str, Any] = {"recurring": [recurring_row(r, now) for r in recurring
                                                 if r is not None]}
    else:
        rows = [data.job_row(job, now) for job in data.load_jobs([client], jids)]
        context = {"rows": rows}
    context.update(
        queue=name, state=state, counts=counts, pager=pager, tabs=_tabs(request, name, counts),
        queue_shard=client.shard,
        live_src=qurl(request, "api_queue_tab", name, state)
        + (f"?page={pager.number}" if pager.number > 1 else ""),
    )
    return render_page(request, "django_qless/queue_tab.html", context,
                       title=f"Queue {name}: {state}",
                       crumbs=[(name, qurl(request, "queue", name)), (state, None)])


@dashboard_view(post_only=True)
def queue_pause(request: HttpRequest, name: str) -> HttpResponse:
    """Pause a queue: workers stop taking its jobs."""
    queue = known_queue(queue_client(request, name), name)
    if queue.paused:
        messages.info(request, f"Queue {name} is already paused: nothing changed.")
        return redirect_back(request, qurl(request, "queue", name))
    queue.pause()
    messages.success(request, f"Paused queue {name}.")
    return redirect_back(request, qurl(request, "queue", name))


@dashboard_view(post_only=True)
def queue_unpause(request: HttpRequest, name: str) -> HttpResponse:
    """Unpause a queue."""
    queue = known_queue(queue_client(request, name), name)
    if not queue.paused:
        messages.info(request, f"Queue {name} is not paused: nothing changed.")
        return redirect_back(request, qurl(request, "queue", name))
    queue.unpause()
    messages.success(request, f"Unpaused queue {name}.")
    return redirect_back(request, qurl(request, "queue", name))


@dashboard_view(post_only=True)
def queue_settings(request: HttpRequest, name: str) -> HttpResponse:
    """Set a queue's heartbeat, max concurrency and throttle maximum."""
    client = queue_client(request, name)
    queue = known_queue(client, name)
    form = QueueSettingsForm(request.POST)
    if not form.is_valid():
        messages.error(request, first_error(form))
        return redirect_back(request, qurl(request, "queue", name))
    changed = []
    if form.cleaned_data.get("heartbeat") is not None:
        queue.heartbeat = form.cleaned_data["heartbeat"]
        changed.append(f"heartbeat {form.cleaned_data['heartbeat']}s")
    if form.cleaned_data.get("max_concurrency") is not None:
        queue.max_concurrency = form.cleaned_data["max_concurrency"]
        changed.append(f"max concurrency {form.cleaned_data['max_concurrency']}")
    if form.cleaned_data.get("throttle") is not None:
        queue.set_throttle(form.cleaned_data["throttle"])
        changed.append(f"throttle maximum {form.cleaned_data['throttle']}")
    if changed:
        messages.success(request, f"Queue {name}: set " + ", ".join(changed) + ".")
    else:
        messages.info(request, "Nothing to change.")
    return redirect_back(request, qurl(request, "queue", name))
