"""Bench-only URLs: everything the service serves, plus the baseline: the least a Django view can do to
store a plant from JSON."""

import json

from django.http import JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from plants.models import Plant
from plantstore_site.urls import urlpatterns as service_urlpatterns


@csrf_exempt
def bare_create(request):
    data = json.loads(request.body)
    plant = Plant.objects.create(id=data["id"], name=data["name"], tag=data.get("tag"))
    return JsonResponse({"id": plant.id, "name": plant.name, "tag": plant.tag})


urlpatterns = [
    *service_urlpatterns,
    path("bench/bare-plants", bare_create),
]
