"""Bench-only settings: production settings plus the bare view's URL. Never deployed.

BENCH_LEVERS (comma-separated) takes one part out, for `make bench-levers` to measure what it
costs: `no-request-log` (plants.requests at WARNING), `no-metrics` (no RequestMetricsMiddleware),
`api-middleware-only` (the middleware only the admin needs removed: static files, sessions, CSRF,
auth, messages, clickjacking, axes).
"""

import os

from plantstore_site.settings import *  # noqa: F403
from plantstore_site.settings import LOGGING, MIDDLEWARE

ROOT_URLCONF = "bench.urls"

LEVERS = {lever for lever in os.environ.get("BENCH_LEVERS", "").split(",") if lever}
if unknown := LEVERS - {"no-request-log", "no-metrics", "api-middleware-only"}:
    raise ValueError(f"BENCH_LEVERS: unknown lever(s) {sorted(unknown)}")
if "no-request-log" in LEVERS:
    LOGGING["loggers"]["plants.requests"]["level"] = "WARNING"
if "no-metrics" in LEVERS:
    MIDDLEWARE = [name for name in MIDDLEWARE if name != "plants.metrics.RequestMetricsMiddleware"]
if "api-middleware-only" in LEVERS:
    ADMIN_ONLY = ("whitenoise", "sessions", "csrf", "contrib.auth", "messages", "clickjacking", "axes")
    MIDDLEWARE = [name for name in MIDDLEWARE if not any(part in name for part in ADMIN_ONLY)]
