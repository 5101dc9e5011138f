"""WSGI entry point: what Granian serves (deploy/app_server.py: `plantstore_site.wsgi:application`).

Granian starts every request's environ (Django's request.META) as a copy of its own process
environment (granian/wsgi.py: `dict(os.environ)`, the request on top), and has no option to leave it
out. So the application here takes the process's variables out of each request's environ: no setting
(DJANGO_SECRET_KEY, DATABASE_URL's password) is ever in request.META for an error report to show, and
a variable named HTTP_* cannot read as a header the client sent (tests/test_settings.py). A request's
own value of the same name is kept. Other app servers build the environ from the request alone.
"""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "plantstore_site.settings")

if settings.PLANTS_TRACING:
    # Here, in each worker the app server starts, not before it forks: the SDK's exporter thread
    # must run in the process whose spans it sends.
    from plants import tracing

    tracing.instrument()


def without_process_environment(application):
    """`application` with the process environment's variables taken out of each request's environ."""
    process = dict(os.environ)  # after the settings have read DJANGO_ENV_FILE into it

    def strip_process_environment(environ, start_response):
        for name, value in process.items():
            if environ.get(name) == value:
                del environ[name]
        return application(environ, start_response)

    return strip_process_environment


application = without_process_environment(get_wsgi_application())
