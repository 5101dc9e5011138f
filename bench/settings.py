"""Bench-only settings: production settings plus the bare view's URL. Never deployed."""

from plantstore_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
