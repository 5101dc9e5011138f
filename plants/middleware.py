"""Middleware: one structured log line per request, and no request served after it waited too long."""

import json
import logging
import os
import re
import time

from django.conf import settings

from plants import metrics, timeouts, tracing
from plants.clients import client_ip
from plants.exceptions import ErrorCode, error_response

logger = logging.getLogger("plants.requests")

REQUEST_ID_HEADER = "X-Request-ID"
# A client's request id is echoed only if it is short and plain, so it cannot forge log lines.
SAFE_REQUEST_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")


class RequestLogMiddleware:
    """Logs `{"method", "path", "status", "duration_ms", "token", "client", "request_id", "trace_id",
    "span_id"}` as JSON, and for a refused or failed request (400 and above) its Error body's `error`
    and `message`, which name the cause: `client` is the address the limits count by
    (plants/clients.py), the trace and span ids those of the request's span (plants/tracing.py), as
    OpenTelemetry's log correlation names and writes them.

    Never a request body, a query string or a credential: `token` is the token's name.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        # META, not request.headers, which would copy every header of the request first.
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        # 128 random bits in 32 hex digits, as uuid4().hex gives, without building a UUID.
        request_id = incoming if incoming and SAFE_REQUEST_ID.fullmatch(incoming) else os.urandom(16).hex()
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = request_id
        if logger.isEnabledFor(logging.INFO):
            trace_id, span_id = tracing.request_trace_ids(request)
            auth = getattr(request, "auth", None)  # DRF copies the authenticated ApiToken here
            fields = {
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - started) * 1000, 2),
                "token": getattr(auth, "name", None),
                "client": client_ip(request),
                "request_id": request_id,
                "trace_id": trace_id,
                "span_id": span_id,
            }
            if response.status_code >= 400:
                fields.update(error_of(response))
            logger.info(json.dumps(fields))
        return response


def error_of(response) -> dict:
    """The `error` and `message` of an answer's Error body (every refusal is one); {} for another body."""
    data = getattr(response, "data", None)  # DRF's answer, before rendering
    if data is None and not response.streaming and response.get("Content-Type") == "application/json":
        try:
            data = json.loads(response.content)
        except ValueError:
            return {}
    if isinstance(data, dict) and "error" in data and "message" in data:
        return {"error": data["error"], "message": data["message"]}
    return {}


class QueueDeadlineMiddleware:
    """Answers 503 at once a request that waited for an app server's thread past its patience
    (plants/timeouts.py: QUEUE_PATIENCE_OF_BOUND, half of PLANTS_DATABASE_TIMEOUT_S), before its view
    does anything; its URL resolved, so the metrics count it under its route.

    nginx stamps each request as it passes it on, `X-Request-Start: t=<seconds since the epoch>` (the
    header Heroku's router and APM agents use; deploy/nginx.conf sets it, whatever the client sent),
    and the app server queues it until a thread is free. Without the stamp (runserver, the test
    client) or with one not of that form, nothing is checked; nginx and the app server share a clock.
    A view marked `served_however_long_it_waited` is served anyway.
    """

    def __init__(self, get_response):
        self.get_response = get_response
        self.patience_s = settings.PLANTS_DATABASE_TIMEOUT_S * timeouts.QUEUE_PATIENCE_OF_BOUND

    def __call__(self, request):
        return self.get_response(request)

    def process_view(self, request, view, view_args, view_kwargs):
        stamp = request.META.get("HTTP_X_REQUEST_START", "")
        if not stamp.startswith("t=") or getattr(view, "served_however_long_it_waited", False):
            return None
        try:
            waited = time.time() - float(stamp[2:])
        except ValueError:
            return None
        if waited <= self.patience_s:
            return None
        metrics.TOO_BUSY.labels(metrics.route_label(request.resolver_match.route)).inc()
        message = f"The service is too busy: the request waited {waited:.1f} s to be served; retry later."
        return error_response(ErrorCode.SERVICE_UNAVAILABLE, message, 503)


def served_however_long_it_waited(view):
    """Marks a view QueueDeadlineMiddleware serves whatever its request waited: one that asks no
    database, such as the metrics, which a scrape would otherwise miss while the unit is busiest."""
    view.served_however_long_it_waited = True
    return view
