"""The Error body, the catalog of error codes, and the errors of ours that carry a code.

The handler that renders them is plants/exception_handler.py: it imports DRF's views, which import the
authentication, throttle and parser classes that raise these, so the two cannot share a module.
"""

from enum import IntEnum

from django.http import JsonResponse
from rest_framework import exceptions, status


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
    TOO_MANY_AUTHENTICATION_FAILURES = 42901
    INTERNAL_ERROR = 50000
    SERVICE_UNAVAILABLE = 50300
    # The HTTP layer's own refusals: nginx's (deploy/nginx.conf), and the app's 411 for a chunked
    # body that reached an app server without nginx in front.
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
    ErrorCode.UNAUTHENTICATED: "No bearer token was sent (no Authorization header, or another scheme). "
    "A header that is not ASCII reaches the service as none (the app server passes it on empty).",
    ErrorCode.INVALID_TOKEN: "The bearer token is unknown, expired or revoked.",
    ErrorCode.MALFORMED_CREDENTIALS: "The Authorization header says Bearer but not with exactly one token.",
    ErrorCode.FORBIDDEN: "The request is not allowed (e.g. a failed CSRF check in the admin).",
    ErrorCode.NOT_FOUND: "No such path.",
    ErrorCode.METHOD_NOT_ALLOWED: "The path does not answer this method; the Allow header lists those it does.",
    ErrorCode.NOT_ACCEPTABLE: "The response cannot be given in a media type the Accept header allows.",
    ErrorCode.BODY_TOO_LARGE: "The body is larger than the service accepts.",
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: "The body is not sent as application/json.",
    ErrorCode.THROTTLED: "Too many requests with this token (or failed admin logins from this address); retry "
    "after the Retry-After header's seconds.",
    ErrorCode.TOO_MANY_AUTHENTICATION_FAILURES: "Too many requests without a valid bearer token from this "
    "client address; they are refused until the Retry-After header's seconds have passed, while a valid token "
    "from it is served.",
    ErrorCode.INTERNAL_ERROR: "An unexpected error in the service; it is logged, and nothing was stored.",
    ErrorCode.SERVICE_UNAVAILABLE: "The database or the rate-limit store cannot be reached, or the request "
    "waited too long to be served; retry later.",
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

    status_code = status.HTTP_400_BAD_REQUEST
    error_code = ErrorCode.BAD_REQUEST


class MalformedBody(ApiError):
    error_code = ErrorCode.MALFORMED_BODY
    default_detail = "The body is not a JSON object."


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


class TooManyAuthenticationFailures(exceptions.Throttled):
    error_code = ErrorCode.TOO_MANY_AUTHENTICATION_FAILURES
    default_detail = "Too many requests without a valid bearer token from this address."


class DatabaseUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    error_code = ErrorCode.SERVICE_UNAVAILABLE
    default_detail = "The service cannot reach its database; retry later."


class RateLimitStoreUnavailable(ApiError):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    error_code = ErrorCode.SERVICE_UNAVAILABLE
    default_detail = "The service cannot reach its rate-limit store; retry later."


class ApplicationError(Exception):
    """A business rule refused the request. Raised by plants/services.py, which knows nothing of HTTP;
    the handler answers it 400 with its code and message."""

    error_code = ErrorCode.BAD_REQUEST

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class DuplicatePlantId(ApplicationError):
    error_code = ErrorCode.DUPLICATE_ID

    def __init__(self, plant_id: int):
        super().__init__(f"A plant with id {plant_id} already exists with a different name or tag.")
