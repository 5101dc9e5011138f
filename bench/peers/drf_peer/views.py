"""The DRF peer's API: a ModelSerializer and a create-only viewset; in the equal-work variant, the same
without the serializer's uniqueness SELECT."""

from django.conf import settings
from django.db import IntegrityError
from rest_framework import mixins, serializers, status, viewsets

from bench.peers.tables.models import Plant


class PlantSerializer(serializers.ModelSerializer):
    """As DRF's tutorial writes it: the primary key's UniqueValidator reads the id before each INSERT."""

    class Meta:
        model = Plant
        fields = ["id", "name", "tag"]


class PlantSerializerWithoutUniquenessCheck(PlantSerializer):
    """The equal-work variant's: the primary key alone refuses a duplicate id (the view answers its
    IntegrityError 400), as the service does, so a create runs the service's statements and no more:
    the token's SELECT, the count, the INSERT."""

    class Meta(PlantSerializer.Meta):
        extra_kwargs = {"id": {"validators": []}}


class PlantViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    queryset = Plant.objects.all()
    serializer_class = PlantSerializerWithoutUniquenessCheck if settings.PEER_EQUAL_WORK else PlantSerializer

    def create(self, request, *args, **kwargs):
        response = super().create(request, *args, **kwargs)
        response.status_code = status.HTTP_200_OK  # the contract answers 200, not CreateModelMixin's 201
        return response

    def perform_create(self, serializer):
        try:
            serializer.save()
        except IntegrityError:
            raise serializers.ValidationError({"id": ["A plant with this id already exists."]}) from None
