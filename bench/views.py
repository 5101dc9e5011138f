"""The baseline: the least a Django view can do to store a plant from JSON."""

import json

from django.http import JsonResponse
from django.views.decorators.csrf import csrf_exempt

from plants.models import Plant


@csrf_exempt
def bare_create(request):
    data = json.loads(request.body)
    plant = Plant.objects.create(id=data["id"], name=data["name"], tag=data.get("tag"))
    return JsonResponse({"id": plant.id, "name": plant.name, "tag": plant.tag})
