"""The django-ninja peer's settings: the shared startproject settings and its URLs."""

from bench.peers.settings import *  # noqa: F403

ROOT_URLCONF = "bench.peers.ninja_peer.urls"
