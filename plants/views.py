"""HTTP views: the create-only plant endpoint, the health check, and JSON error handlers."""

from django.db import DatabaseError, connection
from django.http import JsonResponse
from rest_framework import mixins, status, viewsets
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.response import Response

from plants.exceptions import ErrorCode, MalformedBody, error_response
from plants.negotiation import request_media_type
from plants.schema import create_plant_schema
from plants.serializers import NewPlantSerializer, plant_representation
from plants.services import plant_create
from plants.throttling import add_rate_limit_headers


class PlantViewSet(mixins.CreateModelMixin, viewsets.GenericViewSet):
    """POST /plants: validate a NewPlant, store it, answer 200 with the Plant."""

    serializer_class = NewPlantSerializer

    @create_plant_schema
    def create(self, request, *args, **kwargs):
        serializer = NewPlantSerializer(data=read_json_object(request))
        serializer.is_valid(raise_exception=True)
        plant = plant_create(**serializer.validated_data)
        return Response(plant_representation(plant), status=status.HTTP_200_OK)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        add_rate_limit_headers(request, response)
        return response


def read_json_object(request) -> dict:
    """The parsed body; a missing Content-Type is 415 and an empty body is MALFORMED_BODY."""
    media_type = request_media_type(request)
    if media_type != "application/json":
        raise UnsupportedMediaType(media_type or "(none)")
    if request.stream is None:
        raise MalformedBody("The body is empty; send a NewPlant JSON object.")
    return request.data


def health(request):
    """GET /healthz: 200 when the database answers a query, 503 with an Error body when not."""
    if request.method not in ("GET", "HEAD"):
        response = error_response(ErrorCode.METHOD_NOT_ALLOWED, f"Method {request.method} not allowed.", 405)
        response["Allow"] = "GET, HEAD"
        return response
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except DatabaseError:
        return error_response(ErrorCode.SERVICE_UNAVAILABLE, "The database does not answer.", 503)
    return JsonResponse({"status": "ok"})


def bad_request(request, exception=None):
    return error_response(ErrorCode.BAD_REQUEST, "Bad request.", 400)


def permission_denied(request, exception=None):
    return error_response(ErrorCode.FORBIDDEN, "Forbidden.", 403)


def csrf_failure(request, reason=""):
    return error_response(ErrorCode.FORBIDDEN, f"CSRF verification failed: {reason}", 403)


def page_not_found(request, exception=None):
    return error_response(ErrorCode.NOT_FOUND, f"No such path: {request.path}", 404)


def server_error(request):
    return error_response(ErrorCode.INTERNAL_ERROR, "Internal server error; it has been logged.", 500)
