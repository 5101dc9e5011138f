"""WSGI entry point of the benchmark server (bench.settings)."""

import os

from django.conf import settings
from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")

application = get_wsgi_application()

if "per-instance-fields" in settings.LEVERS:
    # The serializer without its seam (plants.serializers.shared_bound_fields): DRF's own `fields`,
    # copied and bound for each instance, for make bench-levers to measure what the seam saves.
    from rest_framework import serializers

    from plants.serializers import NewPlantSerializer

    NewPlantSerializer.fields = serializers.Serializer.fields
