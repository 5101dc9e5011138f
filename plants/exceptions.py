"""The Error body, the catalog of error codes, and the handler that renders every API error."""

import logging
from enum import IntEnum

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError, connection
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.serializers import as_serializer_error

from plants import metrics

logger = logging.getLogger(__name__)

# PostgreSQL's read_only_sql_transaction: this server takes no writes (a standby, or a demoted primary).
READ_ONLY_SQLSTATE = "25006"


class ErrorCode(IntEnum):
    """Values of the Error body's `error` field. Stable: clients may switch on them.

    The first three digits are the HTTP status the code is sent with.
    """

    BAD_REQUEST = 40000
    MALFORMED_BODY = 40001
    INVALID_FIELD = 40002
    DUPLICATE_ID = 40003
    UNAUTHENTICATED = 40100
    INVALID_TOKEN = 40101
    MALFORMED_CREDENTIALS = 40102
    FORBIDDEN = 40300
    NOT_FOUND = 40400
    METHOD_NOT_ALLOWED = 40500
    NOT_ACCEPTABLE = 40600
    BODY_TOO_LARGE = 41300
    UNSUPPORTED_MEDIA_TYPE = 41500
    THROTTLED = 42900
    INTERNAL_ERROR = 50000
    SERVICE_UNAVAILABLE = 50300
    # The HTTP layer's own refusals: nginx's (deploy/nginx.conf), and the app's 411 for a chunked
    # body that reached gunicorn without nginx in front.
    LENGTH_REQUIRED = 41100
    URI_TOO_LONG = 41400
    HEADERS_TOO_LARGE = 43100
    NOT_IMPLEMENTED = 50100


ERROR_CODE_DESCRIPTIONS = {
    ErrorCode.BAD_REQUEST: "The request is malformed at the HTTP level (e.g. a disallowed Host header).",
    ErrorCode.MALFORMED_BODY: "The body is empty, not UTF-8, not JSON, or not a JSON object.",
    ErrorCode.INVALID_FIELD: "A field is missing, unknown, of the wrong JSON type or out of bounds; "
    "`fields` names each one.",
    ErrorCode.DUPLICATE_ID: "A plant with this id exists with a different name or tag.",
    ErrorCode.UNAUTHENTICATED: "No bearer token was sent (no Authorization header, or another scheme).",
    ErrorCode.INVALID_TOKEN: "The bearer token is unknown, expired or revoked.",
    ErrorCode.MALFORMED_CREDENTIALS: "The Authorization header says Bearer but not with exactly one token.",
    ErrorCode.FORBIDDEN: "The request is not allowed (e.g. a failed CSRF check in the admin).",
    ErrorCode.NOT_FOUND: "No such path.",
    ErrorCode.METHOD_NOT_ALLOWED: "The path does not answer this method; the Allow header lists those it does.",
    ErrorCode.NOT_ACCEPTABLE: "The response cannot be given in a media type the Accept header allows.",
    ErrorCode.BODY_TOO_LARGE: "The body is larger than the service accepts.",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "The body is not sent as application/json.",
    ErrorCode.THROTTLED: "Too many requests with this token; retry after the Retry-After header's seconds.",
    ErrorCode.INTERNAL_ERROR: "An unexpected error in the service; it is logged, and nothing was stored.",
    ErrorCode.SERVICE_UNAVAILABLE: "The database or the rate-limit store cannot be reached; retry later.",
    ErrorCode.LENGTH_REQUIRED: "A body was sent without a Content-Length the server can use.",
    ErrorCode.URI_TOO_LONG: "The request line (method, path and query) is longer than 8 KiB.",
    ErrorCode.HEADERS_TOO_LARGE: "A request header is longer than 8 KiB, or all of them together than 32 KiB.",
    ErrorCode.NOT_IMPLEMENTED: "The request uses a Transfer-Encoding other than chunked.",
}


def error_body(code: ErrorCode, message: str, fields: dict | None = None) -> dict:
    body = {"error": int(code), "message": message}
    if fields:
        body["fields"] = fields
    return body


def error_response(code: ErrorCode, message: str, status_code: int) -> JsonResponse:
    """An Error body outside DRF: Django's own error handlers and plain views."""
    return JsonResponse(error_body(code, message), status=status_code)


class ApiError(exceptions.APIException):
    """An error of ours with a code of its own from the catalog."""

    error_code = ErrorCode.BAD_REQUEST


class MalformedBody(ApiError):
    status_code = status.HTTP_400_BAD_REQUEST
    error_code = ErrorCode.MALFORMED_BODY
    default_detail = "The body is not a JSON object."


class DuplicatePlantId(ApiError):
    status_code = status.HTTP_400_BAD_REQUEST
    error_code = ErrorCode.DUPLICATE_ID

    def __init__(self, plant_id: int):
        super().__init__(f"A plant with id {plant_id} already exists with a different name or tag.")


class BodyTooLarge(ApiError):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    error_code = ErrorCode.BODY_TOO_LARGE

    def __init__(self, limit: int):
        super().__init__(f"The body is larger than {limit} bytes.")


class LengthRequired(ApiError):
    status_code = status.HTTP_411_LENGTH_REQUIRED
    error_code = ErrorCode.LENGTH_REQUIRED
    default_detail = "A chunked body is not read here; send it with a Content-Length."


class InvalidToken(exceptions.AuthenticationFailed):
    error_code = ErrorCode.INVALID_TOKEN
    bearer_error = "invalid_token"  # RFC 6750, section 3.1


class MalformedCredentials(exceptions.AuthenticationFailed):
    error_code = ErrorCode.MALFORMED_CREDENTIALS
    default_detail = "The Authorization header must be 'Bearer <token>', with exactly one token."


class DatabaseUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    error_code = ErrorCode.SERVICE_UNAVAILABLE
    default_detail = "The service cannot reach its database; retry later."


class RateLimitStoreUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    error_code = ErrorCode.SERVICE_UNAVAILABLE
    default_detail = "The service cannot reach its rate-limit store; retry later."


# DRF's own exceptions, by class; looked up along the MRO so subclasses inherit a code.
DRF_ERROR_CODES = {
    exceptions.ValidationError: ErrorCode.INVALID_FIELD,
    exceptions.ParseError: ErrorCode.MALFORMED_BODY,
    exceptions.NotAuthenticated: ErrorCode.UNAUTHENTICATED,
    exceptions.AuthenticationFailed: ErrorCode.INVALID_TOKEN,
    exceptions.PermissionDenied: ErrorCode.FORBIDDEN,
    exceptions.NotFound: ErrorCode.NOT_FOUND,
    exceptions.MethodNotAllowed: ErrorCode.METHOD_NOT_ALLOWED,
    exceptions.NotAcceptable: ErrorCode.NOT_ACCEPTABLE,
    exceptions.UnsupportedMediaType: ErrorCode.UNSUPPORTED_MEDIA_TYPE,
    exceptions.Throttled: ErrorCode.THROTTLED,
}


def error_code_for(exc: exceptions.APIException) -> ErrorCode:
    if hasattr(exc, "error_code"):  # ours, and our AuthenticationFailed subclasses
        return exc.error_code
    for cls in type(exc).__mro__:
        if cls in DRF_ERROR_CODES:
            return DRF_ERROR_CODES[cls]
    return ErrorCode.INTERNAL_ERROR if exc.status_code >= 500 else ErrorCode.BAD_REQUEST


def _as_drf_exception(exc: Exception) -> Exception:
    """Map Django's exceptions onto DRF's, as DRF's own handler does, plus database outages."""
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    read_only = is_read_only_server(exc)
    if read_only:
        # The next request connects anew: libpq's target_session_attrs=read-write finds the new primary.
        connection.close()
    if read_only or isinstance(exc, (OperationalError, InterfaceError)):
        logger.error("database unavailable: %s", exc.__class__.__name__, exc_info=exc)
        metrics.DATABASE_ERROR["unavailable"].inc()
        return DatabaseUnavailable()
    return exc


def is_read_only_server(exc: Exception) -> bool:
    """A write refused because the server no longer takes writes (SQLSTATE 25006): a primary demoted by
    a failover that left its connections open, as some managed services do."""
    return isinstance(exc, InternalError) and getattr(exc.__cause__, "sqlstate", None) == READ_ONLY_SQLSTATE


def _validation_body(detail) -> dict:
    if not isinstance(detail, dict):
        detail = {"body": detail if isinstance(detail, list) else [detail]}
    fields = {name: [str(message) for message in messages] for name, messages in detail.items()}
    summary = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
    return error_body(ErrorCode.INVALID_FIELD, f"Invalid request body. {summary}", fields)


def api_exception_handler(exc: Exception, context: dict):
    """DRF's EXCEPTION_HANDLER: every API error becomes an Error body."""
    # Imported here: rest_framework.views imports the authentication classes, which import us.
    from rest_framework.views import exception_handler as drf_exception_handler

    exc = _as_drf_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        if isinstance(exc, DatabaseError):
            logger.error("database error", exc_info=exc)
            metrics.DATABASE_ERROR["other"].inc()
        return None  # unexpected: Django logs it and handler500 answers the Error body
    if isinstance(exc, exceptions.ValidationError) and error_code_for(exc) == ErrorCode.INVALID_FIELD:
        response.data = _validation_body(exc.detail)
    else:
        response.data = error_body(error_code_for(exc), str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        metrics.THROTTLED.inc()
    if bearer_error := getattr(exc, "bearer_error", None):
        if "WWW-Authenticate" in response:
            response["WWW-Authenticate"] += f', error="{bearer_error}"'
    return response
