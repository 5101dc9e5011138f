"""The DRF peer of `make bench`: POST /plants as a DRF tutorial would write it. Never deployed.

Bearer tokens read by digest through the ORM, a ModelSerializer, a create-only viewset; with PEER_EQUAL_WORK=1,
a throttle class counting each request per token, and no uniqueness SELECT."""

from django.conf import settings
from django.db import IntegrityError
from rest_framework import authentication, exceptions, mixins, permissions, serializers, status, throttling, viewsets
from rest_framework.routers import SimpleRouter

from bench.peers.equal_work import count_request, seconds_to_next_window
from bench.peers.shared import LIMIT
from bench.peers.tables.models import ApiToken, Plant


class BearerTokenAuthentication(authentication.BaseAuthentication):
    """`Authorization: Bearer plnt_…`: the token row is read by its digest on every request."""

    def authenticate(self, request):
        parts = authentication.get_authorization_header(request).split()
        if not parts or parts[0].lower() != b"bearer":
            return None
        if len(parts) != 2 or not (token := ApiToken.objects.authenticate(parts[1])):
            raise exceptions.AuthenticationFailed("Invalid token.")
        return token, token

    def authenticate_header(self, request) -> str:
        return 'Bearer realm="api"'


class TokenRateThrottle(throttling.BaseThrottle):
    """At most LIMIT requests per token per fixed window; DRF throttles after authentication (request.auth)."""

    def allow_request(self, request, view) -> bool:
        return count_request(f"drf:{request.auth.pk}") <= LIMIT

    def wait(self) -> float:
        return seconds_to_next_window()


class PlantSerializer(serializers.ModelSerializer):
    """As DRF's tutorial writes it: the primary key's UniqueValidator reads the id before each INSERT."""

    class Meta:
        model = Plant
        fields = ["id", "name", "tag"]


class PlantSerializerWithoutUniquenessCheck(PlantSerializer):
    """The equal-work variant's: the primary key alone refuses a duplicate id (the view answers its
    IntegrityError 400), as the service does: the token's SELECT, the count, the INSERT, no more."""

    class Meta(PlantSerializer.Meta):
        extra_kwargs = {"id": {"validators": []}}


class PlantViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    queryset = Plant.objects.all()
    authentication_classes = [BearerTokenAuthentication]
    permission_classes = [permissions.IsAuthenticated]
    serializer_class = PlantSerializerWithoutUniquenessCheck if settings.PEER_EQUAL_WORK else PlantSerializer
    throttle_classes = [TokenRateThrottle] if settings.PEER_EQUAL_WORK else []

    def create(self, request, *args, **kwargs):
        response = super().create(request, *args, **kwargs)
        response.status_code = status.HTTP_200_OK  # the contract answers 200, not CreateModelMixin's 201
        return response

    def perform_create(self, serializer):
        try:
            serializer.save()
        except IntegrityError:
            raise serializers.ValidationError({"id": ["A plant with this id already exists."]}) from None


router = SimpleRouter(trailing_slash=False)
router.register("plants", PlantViewSet)
urlpatterns = router.urls
