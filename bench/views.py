"""The baseline: the least a Django view can do to store a plant from JSON."""

import json

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from plants.models import Plant
from plants.views import client_ip


@csrf_exempt
def bare_create(request):
    data = json.loads(request.body)
    plant = Plant.objects.create(id=data["id"], name=data["name"], tag=data.get("tag"))
    return JsonResponse({"id": plant.id, "name": plant.name, "tag": plant.tag})


def client_address(request):
    """The address the service's client_ip() (the admin's login throttle) sees, for bench.server_promises."""
    return JsonResponse({"client_ip": client_ip(request), "remote_addr": request.META.get("REMOTE_ADDR", "")})
