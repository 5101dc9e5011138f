"""The service's URLs, plus views that exist only in the tests: what a view added later might raise or be."""

from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, JsonResponse
from django.urls import path
from rest_framework.permissions import AllowAny, DjangoModelPermissions, IsAdminUser, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from plants.models import Plant
from plantstore_site.urls import handler400, handler403, handler404, handler500, urlpatterns  # noqa: F401

RAISED = {
    "validation-error": ValidationError("The plant is not in season."),
    "not-found": Http404("No such plant."),
    "permission-denied": PermissionDenied("Not your plant."),
}


class RaisingView(APIView):
    """An API view (the API's settings: its parser, renderer and exception handler) that raises Django's exceptions."""

    authentication_classes = []
    permission_classes = [AllowAny]
    throttle_classes = []

    def post(self, request, kind: str):
        raise RAISED[kind]


class WhoAmIView(APIView):
    """An API view that reads request.user as DRF code does (the API's authentication and settings)."""

    permission_classes = [IsAuthenticated]

    def post(self, request):
        return Response({"user": str(request.user), "username": request.user.get_username()})


class StaffOnlyView(WhoAmIView):
    permission_classes = [IsAdminUser]


class ModelPermissionsView(WhoAmIView):
    permission_classes = [DjangoModelPermissions]
    queryset = Plant.objects.all()


def plain(request):
    """A plain Django view: what runs on it is whatever MIDDLEWARE says."""
    return JsonResponse({"method": request.method})


def plain_forbidden(request):
    """A plain Django view that refuses: Django's handler403 answers."""
    raise PermissionDenied("Not your plant.")


def request_meta_names(request):
    """The names in request.META: the WSGI environ the app server built for this request."""
    return JsonResponse({"names": sorted(request.META)})


urlpatterns = [
    *urlpatterns,
    path("test/meta", request_meta_names),
    path("test/raise/<str:kind>", RaisingView.as_view()),
    path("test/whoami", WhoAmIView.as_view()),
    path("test/staff-only", StaffOnlyView.as_view()),
    path("test/model-permissions", ModelPermissionsView.as_view()),
    path("test/plain", plain),
    path("test/plain-forbidden", plain_forbidden),
]
