"""Bench-only URLs: everything the service serves, plus the bare baseline view."""

from django.urls import path

from bench.views import bare_create
from plantstore_site.urls import urlpatterns as service_urlpatterns

urlpatterns = [
    *service_urlpatterns,
    path("bench/bare-plants", bare_create),
]
