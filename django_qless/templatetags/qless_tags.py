"""Template helpers: namespace-aware URLs, times, durations, pretty JSON (all escaped)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any
from urllib.parse import urlencode

from django import template
from django.urls import NoReverseMatch, reverse

__all__ = ["duration", "epoch", "no_jobs", "page_url", "pretty_json", "qless_nav",
           "qless_search_value", "qless_section", "qless_url", "register"]

register = template.Library()


@register.simple_tag(takes_context=True)
def qless_url(context: template.Context, name: str, *args: Any) -> str:
    """Reverse a dashboard URL in whichever namespace the page was served from."""
    ns = context.get("qless_ns") or "django_qless"
    try:
        return reverse(f"{ns}:{name}", args=[str(a) for a in args])
    except NoReverseMatch:
        # A name written by another client may break our converters' rules: no link, no 500.
        return "#"


@register.simple_tag(takes_context=True)
def page_url(context: template.Context, number: int) -> str:
    """Return the current query string with ``page`` replaced."""
    request = context.get("request")
    params: dict[str, str] = {}
    if request is not None:
        params = {k: v for k, v in request.GET.items() if k != "page"}
    params["page"] = str(number)
    return "?" + urlencode(params)


@register.filter
def epoch(value: Any) -> dt.datetime | None:
    """Turn epoch seconds into an aware UTC datetime (None/0 stay empty)."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    if seconds <= 0:
        return None
    try:
        return dt.datetime.fromtimestamp(seconds, tz=dt.UTC)
    except (OverflowError, OSError, ValueError):
        return None


@register.filter
def duration(value: Any) -> str:
    """Format seconds as ``1d 2h``, ``3m 4s``, ``5m``, ``5s`` or ``0.25s``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return ""
    if abs(seconds) < 0.005:  # clock jitter must not show as "-0.00s"
        seconds = 0.0
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    if seconds < 10 and (seconds < 1 or seconds != int(seconds)):
        return f"{sign}{seconds:.2f}s"
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    # A zero second part is left out: a recurring job runs "every 5m", not "every 5m 0s".
    if days:
        return f"{sign}{days}d" + (f" {hours}h" if hours else "")
    if hours:
        return f"{sign}{hours}h" + (f" {minutes}m" if minutes else "")
    if minutes:
        return f"{sign}{minutes}m" + (f" {secs}s" if secs else "")
    return f"{sign}{secs}s"


@register.filter
def pretty_json(value: Any) -> str:
    """Pretty-print JSON text or a value (the result is escaped by the template as usual)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return str(value)
    try:
        return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)
    except (TypeError, ValueError):
        return str(value)



# -- operator's console: current nav section ------------------------------------------------
# URL name prefixes -> the nav section they belong to (the longest prefix wins).
_SECTIONS = (("overview", "overview"), ("queue", "overview"), ("job", "job"),
             ("failed", "failed"), ("tracked", "tracked"), ("tag", "search"),
             ("search", "search"), ("worker", "workers"), ("forget-worker", "workers"),
             ("recurring", "recurring"), ("schedule", "schedules"), ("completed", "completed"),
             ("throttle", "throttles"), ("config", "config"), ("events", "events"),
             ("charts", "charts"), ("redis", "redis"))


NAV = (("overview", "Overview"), ("failed", "Failed"), ("tracked", "Tracked"),
       ("workers", "Workers"), ("recurring", "Recurring"), ("schedules", "Schedules"),
       ("completed", "Completed"), ("throttles", "Throttles"), ("config", "Config"),
       ("events", "Events"), ("charts", "Charts"), ("redis", "Redis"))


@register.simple_tag
def qless_nav() -> tuple[tuple[str, str], ...]:
    """Return the nav sections as (URL name, label)."""
    return NAV


@register.simple_tag(takes_context=True)
def qless_section(context: template.Context) -> str:
    """Return the nav section of the current page ('' when unknown)."""
    request = context.get("request")
    match = getattr(request, "resolver_match", None)
    name = (getattr(match, "url_name", None) or "") if match is not None else ""
    best = ""
    for prefix, section in sorted(_SECTIONS, key=lambda item: -len(item[0])):
        if name.startswith(prefix):
            best = section
            break
    if best == "job":
        # A job belongs to no one section: a failed or completed job to that list's, any
        # other job to none (not Overview, which is not where it was found).
        job = context.get("job")
        state = job.get("state") if isinstance(job, dict) else getattr(job, "state", None)
        return {"failed": "failed", "complete": "completed"}.get(str(state), "")
    return best


QUEUE_STATES = ("running", "waiting", "scheduled", "stalled", "depends", "recurring", "throttled")


@register.filter
def no_jobs(counts: Any) -> bool:
    """Tell whether a queue's counts show no job in any indexed state."""
    if not isinstance(counts, dict):
        return False
    try:
        return not any(int(counts.get(state) or 0) for state in QUEUE_STATES)
    except (TypeError, ValueError):
        return False


@register.simple_tag(takes_context=True)
def qless_search_value(context: template.Context) -> str:
    """Return what the header's search box shows (the page's search or tag, else empty)."""
    value = context.get("q") or context.get("tag_query") or ""
    return value if isinstance(value, str) else ""
