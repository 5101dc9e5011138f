"""Prometheus metrics: what the service counts, the middleware that times requests, the /metrics text."""

import os
import time

from prometheus_client import (
    CONTENT_TYPE_PLAIN_0_0_4,
    REGISTRY,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
    multiprocess,
)

# prometheus-client reads its own variable, PROMETHEUS_MULTIPROC_DIR, from the environment. Under the
# app server every worker writes its samples to files in that folder (one per unit, shared by a
# reload's old and new app servers, emptied at start by deploy/unit.py) and /metrics sums them;
# elsewhere (runserver, tests) the samples live in this process.
MULTIPROCESS = bool(os.environ.get("PROMETHEUS_MULTIPROC_DIR"))
# The classic text format, which every Prometheus 2.x reads (our names need none of 1.0.0's escaping).
CONTENT_TYPE = CONTENT_TYPE_PLAIN_0_0_4

REQUESTS = Counter(
    "plants_http_requests", "HTTP requests answered, by route, method and status.", ["route", "method", "status"]
)
REQUEST_DURATION = Histogram(
    "plants_http_request_duration_seconds",
    "Seconds from the request reaching Django to its answer, by route and method.",
    ["route", "method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
CREATES = Counter(
    "plants_creates",
    "POST /plants outcomes: created; retry (the same plant sent again, answered 200); duplicate (400).",
    ["outcome"],
)
AUTH_FAILURES = Counter("plants_auth_failures", "API requests refused for their credentials, by reason.", ["reason"])
THROTTLED = Counter(
    "plants_throttled",
    "Requests refused with 429: over their token's rate, or from an address over its failed authentications.",
)
UNCOUNTED = Counter(
    "plants_rate_limit_uncounted",
    "Requests served without being counted against their limit: the rate-limit store failed, and the "
    "limits fail open (PLANTS_RATE_LIMIT_FAILURE_MODE).",
)
DATABASE_ERRORS = Counter(
    "plants_database_errors",
    "Requests that failed on the database: unavailable (answered 503) or other (500).",
    ["kind"],
)
TOO_BUSY = Counter(
    "plants_too_busy",
    "Requests answered 503 too busy, by route: they waited for an app server's thread past half the database bound.",
    ["route"],
)
READINESS_FAILURES = Counter(
    "plants_readiness_failures",
    "Health checks (/healthz) answered 503, by the dependency that did not answer: behind a balancer "
    "that has taken every app server out, no request reaches the app, and these alone go on failing.",
    ["dependency"],
)

# Bound once, so counting costs one increment, and every series exists (at 0) from the first scrape.
CREATE_OUTCOME = {outcome: CREATES.labels(outcome) for outcome in ("created", "retry", "duplicate")}
AUTH_FAILURE = {
    reason: AUTH_FAILURES.labels(reason) for reason in ("missing", "malformed", "unknown", "revoked", "expired")
}
DATABASE_ERROR = {kind: DATABASE_ERRORS.labels(kind) for kind in ("unavailable", "other")}
# The create's, at 0 from the start (as its requests' below); another route's when first refused.
TOO_BUSY.labels("/plants")

# Labels come only from these fixed sets and from the URL patterns, so no client can grow the series.
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_request_series: dict[tuple[str, str, int], tuple] = {}


def route_label(pattern: str | None) -> str:
    """'^plants$' (a router's regex) or 'healthz' (a path()) -> '/plants', '/healthz'; None (no URL
    pattern matched: a 404, or a 400 before routing) -> '(unmatched)'."""
    return "(unmatched)" if pattern is None else "/" + pattern.removeprefix("^").removesuffix("$")


def request_series(pattern: str | None, method: str, status: int) -> tuple:
    """The counter and the histogram of requests to `pattern` by `method` answered `status`, bound once."""
    key = (pattern, method, status)
    series = _request_series.get(key)
    if series is None:
        # A dict read is cheaper than labels()' validation and lock; a race only binds a child twice.
        route = route_label(pattern)
        series = _request_series[key] = (
            REQUESTS.labels(route, method, str(status)),
            REQUEST_DURATION.labels(route, method),
        )
    return series


def record_request(pattern: str | None, method: str, status: int, seconds: float) -> None:
    """Count one answered request and observe its duration."""
    series = request_series(pattern, method, status)
    series[0].inc()
    series[1].observe(seconds)


def readiness_failed(dependency: str) -> None:
    """Count a /healthz 503 against `dependency`, as /healthz names it ("rate-limit store": rate_limit_store)."""
    READINESS_FAILURES.labels(dependency.replace("-", "_").replace(" ", "_")).inc()


for dependency in ("database", "rate_limit_store"):  # at 0 from the start: the alerts read their increase
    READINESS_FAILURES.labels(dependency)

# The creates the objectives' alerts count (all, and the 5xx), at 0 from a server's first scrape:
# Prometheus takes a series' first sample as its start, so one first seen at 3 (503s in the seconds
# after a restart or a release, before the scrape) would have its 3 lost to rate() and the alerts.
for status in (200, 500, 503):
    request_series("^plants$", "POST", status)


class RequestMetricsMiddleware:
    """Counts every request by route (its URL pattern, never the raw path), method and status."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.perf_counter()
        response = self.get_response(request)
        match = request.resolver_match
        method = request.method if request.method in METHODS else "other"
        record_request(match.route if match else None, method, response.status_code, time.perf_counter() - started)
        return response


def exposition() -> bytes:
    """Every metric in Prometheus' text format, summed over the server's worker processes, living or not."""
    if not MULTIPROCESS:
        return generate_latest(REGISTRY)
    # prometheus-client's multiprocess mode: every worker's files, an exited worker's included (its
    # counts never drop out of the totals), until the server starts again and empties the folder.
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return generate_latest(registry)
