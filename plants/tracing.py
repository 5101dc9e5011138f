"""Traces: which trace a request belongs to (W3C Trace Context), and OpenTelemetry when it is on.

OpenTelemetry is on when OTEL_TRACES_EXPORTER names an exporter (settings.PLANTS_TRACING), and
`instrument()` is then called once in each app-server worker (plantstore_site/wsgi.py), after the
fork. Its Django middleware starts one server span per request from the caller's `traceparent`
and `tracestate`, and the psycopg and sqlite3 instrumentations add a child span per statement;
every other choice (exporter, endpoint, sampler, service name) is OpenTelemetry's own `OTEL_*`
environment, read by its SDK. The request's log line then carries that span's ids.

Off, the service imports nothing of OpenTelemetry: `ids_from_traceparent()` reads the caller's
`traceparent` as W3C Trace Context says, so the log line still joins the caller's trace. This is
our own code because no kept package parses the header without importing OpenTelemetry (see
docs/decisions/tracing.md).
"""

import os
import re

from plants.metrics import route_label

# version-trace_id-parent_id-flags; a later version may append fields after another "-".
TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}(-.*)?")
INVALID_TRACE_ID, INVALID_PARENT_ID = "0" * 32, "0" * 16


def caller_trace_id(traceparent: str) -> str | None:
    """The trace id of a valid W3C `traceparent` header, or None: a request with none, or an invalid
    one (version ff, a version 00 with more fields, all-zero ids, upper-case hex, two headers that a
    server joined with a comma), starts a trace of its own."""
    match = TRACEPARENT.fullmatch(traceparent.strip(" \t"))
    if not match:
        return None
    version, trace_id, parent_id, more = match.groups()
    if version == "ff" or (version == "00" and more) or INVALID_TRACE_ID == trace_id or INVALID_PARENT_ID == parent_id:
        return None
    return trace_id


def ids_from_traceparent(request) -> tuple[str, str]:
    """(trace_id, span_id) for a request with no OpenTelemetry span: the caller's trace, or a new
    one, and a new span id for this request, in OpenTelemetry's hex forms."""
    trace_id = caller_trace_id(request.META.get("HTTP_TRACEPARENT", ""))
    return trace_id or os.urandom(16).hex(), os.urandom(8).hex()


def request_trace_ids(request) -> tuple[str, str]:
    """(trace_id, span_id) of the request's span: OpenTelemetry's, sampled or not, when it traced
    the request (finish_server_span() noted them), else ids_from_traceparent()'s."""
    return getattr(request, "trace_ids", None) or ids_from_traceparent(request)


def finish_server_span(span, request, response) -> None:
    """Django instrumentation's response hook, called with the request's span, sampled or not.

    Notes the span's ids on the request for its log line. On a recorded span: the route as the
    metrics label it (`/plants`, the router's `^plants$` made a path template), in the span's name
    too; the URL without its query string, whose values a span must not carry (a client may put
    anything there, a credential included)."""
    from opentelemetry.trace import format_span_id, format_trace_id  # noqa: PLC0415

    context = span.get_span_context()
    request.trace_ids = (format_trace_id(context.trace_id), format_span_id(context.span_id))
    if not span.is_recording():
        return
    if pattern := span.attributes.get("http.route"):
        route = route_label(pattern)
        span.set_attribute("http.route", route)
        span.update_name(f"{request.method} {route}")
    for name in ("http.url", "url.full", "http.target"):
        value = span.attributes.get(name)
        if isinstance(value, str) and "?" in value:
            span.set_attribute(name, value.split("?", 1)[0])
    if "url.query" in span.attributes:
        span.set_attribute("url.query", "")


def instrument() -> None:
    """Configure OpenTelemetry's SDK from its OTEL_* environment and instrument Django and the
    database drivers. Call it once per process, before Django builds its middleware."""
    # OTLP over HTTP is the protocol the OpenTelemetry spec makes the default, and the exporter we
    # install; the Python SDK alone would pick gRPC.
    os.environ.setdefault("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    from opentelemetry.distro import OpenTelemetryConfigurator  # noqa: PLC0415
    from opentelemetry.instrumentation.django import DjangoInstrumentor  # noqa: PLC0415
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor  # noqa: PLC0415
    from opentelemetry.instrumentation.sqlite3 import SQLite3Instrumentor  # noqa: PLC0415

    # The worker's pid tells one app-server worker's spans from another's.
    OpenTelemetryConfigurator().configure(resource_attributes={"process.pid": os.getpid()})
    # Its middleware goes just inside ours that log and count each request: they see every answer,
    # one it refuses included (a Host not allowed is refused as it starts its span), and the span
    # covers everything else.
    from django.conf import settings  # noqa: PLC0415

    position = settings.MIDDLEWARE.index("plants.middleware.RequestLogMiddleware") + 1
    DjangoInstrumentor().instrument(middleware_position=position, response_hook=finish_server_span)
    PsycopgInstrumentor().instrument()
    SQLite3Instrumentor().instrument()
