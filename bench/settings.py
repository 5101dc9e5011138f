"""Bench-only settings: production settings plus the bare view's URL. Never deployed.

The bare view (/bench/bare-plants) runs the same middleware as /plants.
"""

from plantstore_site.settings import *  # noqa: F403

ROOT_URLCONF = "bench.urls"
