"""HTTP views: the create-only plant endpoint, the health check, metrics, and JSON error handlers."""

import hmac

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from rest_framework import status, viewsets
from rest_framework.exceptions import UnsupportedMediaType
from rest_framework.response import Response

from plants import metrics as service_metrics
from plants.exceptions import ErrorCode, LengthRequired, MalformedBody, error_response
from plants.middleware import served_however_long_it_waited
from plants.negotiation import request_media_type
from plants.readiness import unready_dependencies
from plants.schema import create_plant_schema
from plants.serializers import NewPlantSerializer, PlantSerializer
from plants.throttling import add_rate_limit_headers
from plants.tokens import metrics_tokens


class PlantViewSet(viewsets.GenericViewSet):
    """POST /plants: validate a NewPlant, store it, answer 200 with the Plant.

    Its own `create`, not CreateModelMixin's: the contract answers 200 (the mixin's answers 201),
    and a retry of the same create answers the stored plant.
    """

    serializer_class = NewPlantSerializer
    # POST alone: DRF's OPTIONS would answer 200 with its metadata (this docstring among it), which the
    # contract does not name; every other method is a 405 whose Allow says POST.
    http_method_names = ["post"]

    @create_plant_schema
    def create(self, request, *args, **kwargs):
        serializer = NewPlantSerializer(data=read_json_object(request))
        serializer.is_valid(raise_exception=True)
        plant = serializer.save()
        return Response(PlantSerializer(plant).data, status=status.HTTP_200_OK)

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        add_rate_limit_headers(request, response)
        return response


def read_json_object(request) -> dict:
    """The parsed body; a missing Content-Type is 415 and an empty body is MALFORMED_BODY.

    The media type is the negotiator's rule, asked here too because DRF parses no empty body.
    """
    if request.negotiator.select_parser(request, request.parsers) is None:
        raise UnsupportedMediaType(request_media_type(request) or "(none)")
    if "HTTP_TRANSFER_ENCODING" in request.META and not request.META.get("CONTENT_LENGTH"):
        # Django reads only Content-Length bodies: a chunked one would look empty. nginx (make
        # serve) de-chunks bodies, so this is an app server without it in front.
        raise LengthRequired()
    if request.stream is None:
        raise MalformedBody("The body is empty; send a NewPlant JSON object.")
    return request.data


@csrf_exempt  # no cookies, no side effects: every method other than GET and HEAD is a plain 405
def health(request):
    """GET /healthz, readiness: 200 when the database and the rate-limit store answer, else 503 naming which not."""
    if request.method not in ("GET", "HEAD"):
        return read_only(request)
    if unready := unready_dependencies():
        for name in unready:
            service_metrics.readiness_failed(name)
        names = " and the ".join(unready)
        verb = "does" if len(unready) == 1 else "do"
        return error_response(ErrorCode.SERVICE_UNAVAILABLE, f"The {names} {verb} not answer.", 503)
    return JsonResponse({"status": "ok"})


@csrf_exempt  # as /healthz: a plain 405 for other methods, never a CSRF 403
def liveness(request):
    """GET /livez, liveness: 200 while this process answers at all; no dependency is asked."""
    if request.method not in ("GET", "HEAD"):
        return read_only(request)
    return JsonResponse({"status": "ok"})


@served_however_long_it_waited  # no database: a scrape of a unit its own threads keep waiting is served
def metrics(request):
    """GET /metrics for Prometheus, behind its own bearer token (PLANTS_METRICS_TOKEN); 404 while unset.

    Authorization: Bearer <PLANTS_METRICS_TOKEN>

    While one is rotated, the setting holds two, comma-separated, and either is taken.
    """
    accepted = metrics_tokens(settings.PLANTS_METRICS_TOKEN)
    if not accepted:
        return page_not_found(request)
    scheme, _, credentials = request.headers.get("Authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not credentials.strip():
        response = error_response(ErrorCode.UNAUTHENTICATED, "Send the metrics token as a bearer token.", 401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    sent = credentials.strip().encode()
    if not any([hmac.compare_digest(sent, token.encode()) for token in accepted]):  # each compared, always
        response = error_response(ErrorCode.INVALID_TOKEN, "The metrics token is not valid.", 401)
        response["WWW-Authenticate"] = 'Bearer realm="metrics", error="invalid_token"'
        return response
    if request.method not in ("GET", "HEAD"):
        return read_only(request)
    return HttpResponse(service_metrics.exposition(), content_type=service_metrics.CONTENT_TYPE)


def read_only(request):
    """405 for a plain view that answers only GET and HEAD, with its Allow header."""
    response = error_response(ErrorCode.METHOD_NOT_ALLOWED, f"Method {request.method} not allowed.", 405)
    response["Allow"] = "GET, HEAD"
    return response


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


def login_locked_out(request, credentials, *args, **kwargs):
    """django-axes' answer once a (user name, address) pair or an address has too many failed admin logins."""
    seconds = int(settings.AXES_COOLOFF_TIME.total_seconds())
    response = error_response(
        ErrorCode.THROTTLED,
        "Too many failed logins for this user from this address, or from this address; "
        f"try again in {seconds // 60} minutes.",
        429,
    )
    response["Retry-After"] = str(seconds)
    return response
