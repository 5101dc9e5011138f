"""WSGI entry point of the django-ninja peer."""

import os

from django.core.wsgi import get_wsgi_application

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.peers.ninja_peer.settings"

application = get_wsgi_application()
