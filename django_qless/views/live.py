"""A live event stream (Server-Sent Events from the engine's log channel) and its page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from django_qless.core.feed import LogFeed
from django_qless.views.base import (
    api_view,
    client_for,
    dashboard_view,
    qurl,
    render_page,
    ui_settings,
)

__all__ = ["events", "events_stream"]

KEEPALIVE_SECONDS = 15.0


def _stream(client: Any, seconds: float) -> Iterator[str]:
    """Relay the engine's log events for a bounded time; the browser's EventSource reconnects."""
    with LogFeed(client) as feed:
        feed.open()
        yield "retry: 2000\n\n"
        deadline, quiet_since = time.monotonic() + seconds, time.monotonic()
        while time.monotonic() < deadline:
            payload = feed.next(timeout=1.0)
            if payload is None:
                if time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                    quiet_since = time.monotonic()
                    yield ": keepalive\n\n"
                continue
            payload.setdefault("when", time.time())
            # Re-encoded on one line: a raw newline would end the SSE field early.
            yield f"event: qless\ndata: {json.dumps(payload, ensure_ascii=True)}\n\n"
            quiet_since = time.monotonic()


@api_view
def events_stream(request: HttpRequest) -> HttpResponse:
    """Stream engine events as ``text/event-stream`` (staff session or bearer token)."""
    seconds = float(ui_settings().get("EVENTS_STREAM_SECONDS", 25))
    response = StreamingHttpResponse(_stream(client_for(request), seconds),
                                     content_type="text/event-stream; charset=utf-8")
    response["X-Accel-Buffering"] = "no"  # let proxies pass events through at once
    return response  # type: ignore[return-value]


@dashboard_view()
def events(request: HttpRequest) -> HttpResponse:
    """Show engine events (put, completed, failed, canceled, ...) as they happen."""
    return render_page(request, "django_qless/events.html",
                       {"stream_src": qurl(request, "api_events")},
                       title="Live events", crumbs=[("Events", None)])
