"""The django-ninja peer's URLs: its API, the admin, and /healthz and /livez for the bench (a unit is ready on /livez)."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import path

from bench.peers.ninja_peer.api import api

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", lambda request: JsonResponse({"status": "ok"})),
    path("livez", lambda request: JsonResponse({"status": "ok"})),
    path("", api.urls),
]
