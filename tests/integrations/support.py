"""Capture what Sentry and OpenTelemetry send, in memory or to a file a test reads back."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport

__all__ = ["JsonLinesSpanExporter", "MemoryTransport", "read_json_lines", "setup_from_environment"]

DSN = "http://public@sentry.invalid/1"


class MemoryTransport(Transport):
    """Keep envelopes in memory; with `path`, append them to that file on each flush."""

    def __init__(self, path: str | None = None) -> None:
        super().__init__({"dsn": DSN})
        self.path = path
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def items(self) -> list[tuple[str, Any]]:
        """Return (type, JSON payload) of every item sent so far."""
        return [(item.type or "", item.payload.json) for env in self.envelopes
                for item in env.items]

    def events(self) -> list[dict[str, Any]]:
        """Return the error events sent so far."""
        return [payload for kind, payload in self.items() if kind == "event"]

    def spans(self) -> list[dict[str, Any]]:
        """Return the spans sent so far (streamed span items)."""
        return spans_of(self.items())

    def flush(self, timeout: float = 0, callback: Any = None) -> None:
        if self.path is None:
            return
        items, self.envelopes = self.items(), []
        with open(self.path, "a") as out:
            for kind, payload in items:
                out.write(json.dumps({"type": kind, "pid": os.getpid(),
                                      "payload": payload}) + "\n")

    def kill(self) -> None:
        pass


def spans_of(items: Sequence[tuple[str, Any]]) -> list[dict[str, Any]]:
    """Return the spans in envelope items as {name, trace_id, span_id, parent_span_id,
    status ("ok"/"error"), attributes (with "sentry.op")}: streamed span items (sentry-sdk
    3) or transactions and their child spans (sentry-sdk 2)."""
    spans = []
    for kind, payload in items:
        if kind == "span":
            for span in payload.get("items", []):
                attrs = {k: v.get("value") for k, v in span.get("attributes", {}).items()}
                spans.append({**span, "attributes": attrs})
        elif kind == "transaction":
            trace = payload["contexts"]["trace"]
            source = payload.get("transaction_info", {}).get("source")
            spans.append(_span(payload["transaction"], {**trace, "source": source},
                               trace.get("data")))
            spans += [_span(s.get("description") or "", {**s, "trace_id": trace["trace_id"]},
                            s.get("data")) for s in payload.get("spans", [])]
    return spans


def _span(name: str, fields: dict[str, Any], data: dict[str, Any] | None) -> dict[str, Any]:
    """Return a sentry-sdk 2 transaction or span in the shape of a streamed span."""
    status = fields.get("status") or "ok"
    attrs = {**(data or {}), "sentry.op": fields.get("op")}
    if fields.get("source"):
        attrs["sentry.segment.name.source"] = fields["source"]
    return {"name": name, "trace_id": fields["trace_id"], "span_id": fields["span_id"],
            "parent_span_id": fields.get("parent_span_id"), "attributes": attrs,
            "status": "ok" if status == "ok" else "error"}


def request_span(name: str) -> Any:
    """Start the span a web request would be in (a transaction on sentry-sdk 2)."""
    import sentry_sdk

    start = getattr(sentry_sdk, "start_transaction", None)
    if start is not None:
        return start(name=name, op="http.server")
    return sentry_sdk.start_span(name=name)


def read_json_lines(path: Path) -> list[dict[str, Any]]:
    """Return the JSON objects of a file written line by line (empty if it is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def span_record(span: Any) -> dict[str, Any]:
    """Return an OpenTelemetry SDK span as JSON-ready fields."""
    parent = span.parent
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": format(span.context.trace_id, "032x"),
        "span_id": format(span.context.span_id, "016x"),
        "parent_id": format(parent.span_id, "016x") if parent is not None else None,
        "status": span.status.status_code.name,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})}
                   for e in span.events],
        "links": [format(link.context.span_id, "016x") for link in span.links],
        "pid": os.getpid(),
    }


def _exporter_base() -> Any:
    from opentelemetry.sdk.trace.export import SpanExporter

    return SpanExporter


class JsonLinesSpanExporter(_exporter_base()):  # type: ignore[misc]
    """Append finished spans to a file, one JSON object a line."""

    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[Any]) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(span_record(span)) + "\n")
        return SpanExportResult.SUCCESS


def setup_from_environment() -> None:
    """Initialise Sentry and/or OpenTelemetry for a worker subprocess."""
    sentry_out = os.environ.get("TEST_SENTRY_OUT")
    if sentry_out:
        import sentry_sdk

        from django_qless.core.integrations.sentry import QlessIntegration

        sentry_sdk.init(dsn=DSN, transport=MemoryTransport(sentry_out), traces_sample_rate=1.0,
                        auto_enabling_integrations=False, integrations=[QlessIntegration()],
                        data_collection={"queues": True})
    otel_out = os.environ.get("TEST_OTEL_OUT")
    if otel_out:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        from django_qless.core.integrations.otel import QlessInstrumentor

        provider = TracerProvider()
        # Batched: the spans leave only when the worker flushes the provider.
        provider.add_span_processor(BatchSpanProcessor(JsonLinesSpanExporter(otel_out),
                                                       schedule_delay_millis=60_000))
        trace.set_tracer_provider(provider)
        QlessInstrumentor().instrument()

