"""Bench-only settings: production settings plus the bare view's URL. Never deployed.

The bare view (/bench/bare-plants) runs the same middleware as /plants.
BENCH_LEVERS (comma-separated) changes one part, for `make bench-levers` to measure what it costs:
`no-request-log` (plants.requests at WARNING), `no-metrics` (no RequestMetricsMiddleware),
`no-admin-middleware` (only the API's own middleware: what serving the admin apart would save it).
"""

from plantstore_site.settings import *  # noqa: F403
from plantstore_site.settings import LOGGING, MIDDLEWARE, env

ROOT_URLCONF = "bench.urls"

LEVERS = set(env.list("BENCH_LEVERS", default=[]))
if unknown := LEVERS - {"no-request-log", "no-metrics", "no-admin-middleware"}:
    raise ValueError(f"BENCH_LEVERS: unknown lever(s) {sorted(unknown)}")
if "no-request-log" in LEVERS:
    LOGGING["loggers"]["plants.requests"]["level"] = "WARNING"
if "no-metrics" in LEVERS:
    MIDDLEWARE = [name for name in MIDDLEWARE if name != "plants.metrics.RequestMetricsMiddleware"]
if "no-admin-middleware" in LEVERS:
    ADMIN_ONLY = ("whitenoise.", "django.contrib.", "django.middleware.csrf.", "axes.")
    MIDDLEWARE = [name for name in MIDDLEWARE if not name.startswith(ADMIN_ONLY)]
