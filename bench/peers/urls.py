"""The Django peers' URLs: the admin, /livez (a unit is ready once it answers), the API of the peer PEER names."""

from importlib import import_module

from django.conf import settings
from django.contrib import admin
from django.http import JsonResponse
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("livez", lambda request: JsonResponse({"status": "ok"})),
    *import_module(f"bench.peers.{settings.PEER}").urlpatterns,
]
