"""A live unit's settings when a test needs a view of tests/urls.py: production's, with the tests' URLs."""

from plantstore_site.settings import *  # noqa: F403

ROOT_URLCONF = "tests.urls"
