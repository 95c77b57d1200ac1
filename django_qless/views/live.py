"""A live event stream (Server-Sent Events from the engine's log channels: every shard of the
alias, merged, each event labelled with its shard) and its page."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse

from django_qless.core.types import QlessClient
from django_qless.views import event_buffer
from django_qless.views.base import (
    api_view,
    dashboard_view,
    qurl,
    render_page,
    ui_settings,
)
from django_qless.views.shards import deployment, shard_filter

__all__ = ["events", "events_stream"]

KEEPALIVE_SECONDS = 15.0


def _stream(client: QlessClient, seconds: float, last_id: str,
            shard: str | None = None) -> Iterator[str]:
    """Relay buffered engine events for a bounded time, from ``Last-Event-ID`` on (only
    shard ``shard``'s when given).

    The browser's EventSource reconnects after each response and sends the id of the last
    event it got, so the events published in between are replayed from the buffer.
    """
    settings = ui_settings()
    buffer = event_buffer.acquire(client, int(settings.get("EVENTS_BUFFER_SIZE", 1000)),
                                  float(settings.get("EVENTS_LINGER_SECONDS", 60)))
    try:
        # The position is taken before the first yield: events that arrive while the client
        # reads that line are sent next, not skipped.
        cursor, lost = buffer.resume(last_id)
        yield "retry: 2000\n\n"
        if lost:
            # Said, not hidden: the page shows where events may be missing.
            yield f"event: gap\ndata: {json.dumps({'until': time.time()})}\n\n"
        deadline, quiet_since = time.monotonic() + seconds, time.monotonic()
        while time.monotonic() < deadline and buffer.alive:
            items = buffer.after(cursor, timeout=1.0)
            if not items:
                if time.monotonic() - quiet_since > KEEPALIVE_SECONDS:
                    quiet_since = time.monotonic()
                    yield ": keepalive\n\n"
                continue
            for cursor, payload in items:
                if shard is not None and payload.get("shard") != shard:
                    continue
                # Re-encoded on one line: a raw newline would end the SSE field early.
                yield (f"id: {buffer.token}-{cursor}\nevent: qless\n"
                       f"data: {json.dumps(payload, ensure_ascii=True)}\n\n")
            quiet_since = time.monotonic()
    finally:
        buffer.detach()


@api_view
def events_stream(request: HttpRequest) -> HttpResponse:
    """Stream engine events as ``text/event-stream`` (staff session or bearer token)."""
    seconds = float(ui_settings().get("EVENTS_STREAM_SECONDS", 25))
    # ``?last=`` is where a page resuming after a pause asks to start (the browser's own
    # reconnects send the header, which wins).
    last_id = (request.headers.get("Last-Event-ID") or request.GET.get("last", ""))[:64]
    # Every shard's log is buffered; ``?shard=`` narrows what this response relays.
    response = StreamingHttpResponse(
        _stream(deployment(request), seconds, last_id, shard_filter(request)),
        content_type="text/event-stream; charset=utf-8")
    response["X-Accel-Buffering"] = "no"  # let proxies pass events through at once
    return response  # type: ignore[return-value]


@dashboard_view()
def events(request: HttpRequest) -> HttpResponse:
    """Show engine events (put, completed, failed, canceled, ...) as they happen."""
    return render_page(request, "django_qless/events.html",
                       {"stream_src": qurl(request, "api_events", query={
                           k: v for k, v in request.GET.items() if k == "shard"})},
                       title="Live events", crumbs=[("Events", None)])
