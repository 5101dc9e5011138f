"""WSGI entry point: what Granian serves (deploy/app_server.py: `plantstore_site.wsgi:application`)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plantstore_site.settings")

application = get_wsgi_application()
