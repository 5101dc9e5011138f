"""WSGI entry point of the DRF peer."""

import os

from django.core.wsgi import get_wsgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peers.drf_peer.settings"

application = get_wsgi_application()
