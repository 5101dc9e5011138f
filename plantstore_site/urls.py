"""URLs: the API at /plants, readiness and liveness, metrics, the OpenAPI schema and docs, and the admin."""

from django.contrib import admin
from django.urls import path
from drf_spectacular.views import SpectacularJSONAPIView, SpectacularSwaggerView, SpectacularYAMLAPIView
from rest_framework.routers import SimpleRouter

from plants.views import PlantViewSet, health, liveness, metrics

router = SimpleRouter(trailing_slash=False)
router.register("plants", PlantViewSet, basename="plant")

urlpatterns = [
    *router.urls,
    path("healthz", health, name="health"),
    path("livez", liveness, name="liveness"),
    path("metrics", metrics, name="metrics"),
    path("openapi.json", SpectacularJSONAPIView.as_view(), name="schema-json"),
    path("openapi.yaml", SpectacularYAMLAPIView.as_view(), name="schema-yaml"),
    path("docs", SpectacularSwaggerView.as_view(url_name="schema-json"), name="docs"),
    path("admin/", admin.site.urls),
]

handler400 = "plants.views.bad_request"
handler403 = "plants.views.permission_denied"
handler404 = "plants.views.page_not_found"
handler500 = "plants.views.server_error"
