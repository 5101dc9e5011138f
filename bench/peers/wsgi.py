"""WSGI entry point of the Django peers, on the settings bench/servers.py names (bench.peers.settings)."""

from django.core.wsgi import get_wsgi_application

application = get_wsgi_application()
