"""The DRF peer's URLs: POST /plants on a router, the admin, and /healthz and /livez for the bench (a unit is ready on /livez)."""

from django.contrib import admin
from django.http import JsonResponse
from django.urls import path
from rest_framework.routers import SimpleRouter

from bench.peers.drf_peer.views import PlantViewSet

router = SimpleRouter(trailing_slash=False)
router.register("plants", PlantViewSet)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("healthz", lambda request: JsonResponse({"status": "ok"})),
    path("livez", lambda request: JsonResponse({"status": "ok"})),
    *router.urls,
]
