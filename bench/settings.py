"""Bench-only settings: production's plus the bare view's URL (bench/urls.py), behind the same middleware."""

from plantstore_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
