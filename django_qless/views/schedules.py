"""Cron schedules: list with their next runs, and run one now."""

from __future__ import annotations

from datetime import datetime
from zoneinfo import ZoneInfo

from django.contrib import messages
from django.http import HttpRequest, HttpResponse

from django_qless.views.base import client_for, dashboard_view, qurl, redirect_back, render_page

__all__ = ["schedule_run", "schedules"]

# Run times shown per schedule.
UPCOMING = 3


@dashboard_view()
def schedules(request: HttpRequest) -> HttpResponse:
    """List every cron schedule with its next run times (in its own time zone)."""
    rows = []
    for state in client_for(request).schedules.all():
        zone = ZoneInfo(state.timezone)
        # Formatted here: the template's date filter would convert to the site's zone.
        times = [datetime.fromtimestamp(t, zone) for t in state.upcoming(UPCOMING)]
        rows.append({"s": state, "upcoming": [
            (w.isoformat(), w.strftime("%Y-%m-%d %H:%M %Z")) for w in times]})
    return render_page(request, "django_qless/schedules.html", {"rows": rows},
                       title="Cron schedules", crumbs=[("Schedules", None)])


@dashboard_view(post_only=True)
def schedule_run(request: HttpRequest, name: str) -> HttpResponse:
    """Put one job of schedule `name` now (its ticks are left as they are)."""
    jid = client_for(request).schedules.run_now(name)
    messages.success(request, f"Put job {jid} of schedule {name} now.")
    return redirect_back(request, qurl(request, "schedules"))
