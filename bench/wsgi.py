"""WSGI entry point of the benchmark server: production's (plantstore_site/wsgi.py) on bench.settings."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

from plantstore_site.wsgi import application  # noqa: E402, F401
