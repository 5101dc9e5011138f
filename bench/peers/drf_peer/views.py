"""The DRF peer's API: a ModelSerializer and a create-only viewset."""

from rest_framework import mixins, serializers, status, viewsets

from bench.peers.tables.models import Plant


class PlantSerializer(serializers.ModelSerializer):
    class Meta:
        model = Plant
        fields = ["id", "name", "tag"]


class PlantViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    queryset = Plant.objects.all()
    serializer_class = PlantSerializer

    def create(self, request, *args, **kwargs):
        response = super().create(request, *args, **kwargs)
        response.status_code = status.HTTP_200_OK  # the contract answers 200, not CreateModelMixin's 201
        return response
