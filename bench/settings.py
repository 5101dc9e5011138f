"""Bench-only settings: production settings plus the bare view's URL. Never deployed.

The bare view (/bench/bare-plants) is an API path: it skips the admin's middleware as /plants does.
BENCH_LEVERS (comma-separated) changes one part, for `make bench-levers` to measure what it costs:
`no-request-log` (plants.requests at WARNING), `no-metrics` (no RequestMetricsMiddleware),
`admin-middleware-on-api` (the API's paths run the admin's middleware too, as before they skipped it).
"""

import os

from plantstore_site.settings import *  # noqa: F403
from plantstore_site.settings import LOGGING, MIDDLEWARE, PLANTS_API_PATHS

ROOT_URLCONF = "bench.urls"
PLANTS_API_PATHS = [*PLANTS_API_PATHS, "/bench/bare-plants"]

LEVERS = {lever for lever in os.environ.get("BENCH_LEVERS", "").split(",") if lever}
if unknown := LEVERS - {"no-request-log", "no-metrics", "admin-middleware-on-api"}:
    raise ValueError(f"BENCH_LEVERS: unknown lever(s) {sorted(unknown)}")
if "no-request-log" in LEVERS:
    LOGGING["loggers"]["plants.requests"]["level"] = "WARNING"
if "no-metrics" in LEVERS:
    MIDDLEWARE = [name for name in MIDDLEWARE if name != "plants.metrics.RequestMetricsMiddleware"]
if "admin-middleware-on-api" in LEVERS:
    PLANTS_API_PATHS = []
