"""DRF's EXCEPTION_HANDLER: every error an API view raises becomes an Error body (plants/exceptions.py).

As HackSoft's styleguide does it: Django's exceptions and our application errors are first mapped to
DRF's, then DRF's own handler answers them (status, WWW-Authenticate, Retry-After, the rollback of an
atomic block), and the body is reshaped. The handler renders; it changes no state. After a failover,
a connection to a server that takes no writes is replaced by the database backend
(plants/postgresql/base.py), not here.
"""

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DatabaseError, InterfaceError, InternalError, OperationalError
from django.http import Http404
from rest_framework import exceptions
from rest_framework.serializers import as_serializer_error
from rest_framework.views import exception_handler as drf_exception_handler

from plants import metrics
from plants.exceptions import ApiError, ApplicationError, DatabaseUnavailable, ErrorCode, error_body
from plants.log_format import log_outage

logger = logging.getLogger(__name__)

# PostgreSQL's read_only_sql_transaction: this server takes no writes (a standby, or a demoted primary).
READ_ONLY_SQLSTATE = "25006"

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


def is_read_only_server(exc: Exception) -> bool:
    """A write refused because the server no longer takes writes (SQLSTATE 25006): a primary demoted by
    a failover that left its connections open, as some managed services do."""
    return isinstance(exc, InternalError) and getattr(exc.__cause__, "sqlstate", None) == READ_ONLY_SQLSTATE


def as_drf_exception(exc: Exception) -> Exception:
    """Map Django's exceptions onto DRF's, as DRF's own handler does, plus ours and database outages."""
    if isinstance(exc, ApplicationError):
        refused = ApiError(exc.message)
        refused.error_code = exc.error_code
        return refused
    if isinstance(exc, DjangoValidationError):
        return exceptions.ValidationError(as_serializer_error(exc))
    if isinstance(exc, Http404):
        return exceptions.NotFound()
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied()
    if is_read_only_server(exc) or isinstance(exc, (OperationalError, InterfaceError)):
        log_outage(logger, "database unavailable: %s", exc.__class__.__name__, error=exc)
        metrics.DATABASE_ERROR["unavailable"].inc()
        return DatabaseUnavailable()
    return exc


def validation_body(detail) -> dict:
    if not isinstance(detail, dict):
        detail = {"body": detail if isinstance(detail, list) else [detail]}
    fields = {name: [str(message) for message in messages] for name, messages in detail.items()}
    summary = "; ".join(f"{name}: {' '.join(messages)}" for name, messages in fields.items())
    return error_body(ErrorCode.INVALID_FIELD, f"Invalid request body. {summary}", fields)


def api_exception_handler(exc: Exception, context: dict):
    """Every API error as an Error body; None (a 500 from Django's handler500) for the unexpected."""
    exc = as_drf_exception(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        if isinstance(exc, DatabaseError):
            logger.error("database error", exc_info=exc)
            metrics.DATABASE_ERROR["other"].inc()
        return None  # unexpected: Django logs it and handler500 answers the Error body
    if isinstance(exc, exceptions.ValidationError) and error_code_for(exc) == ErrorCode.INVALID_FIELD:
        response.data = validation_body(exc.detail)
    else:
        response.data = error_body(error_code_for(exc), str(exc.detail))
    if isinstance(exc, exceptions.Throttled):
        metrics.THROTTLED.inc()
    if bearer_error := getattr(exc, "bearer_error", None):
        if "WWW-Authenticate" in response:
            response["WWW-Authenticate"] += f', error="{bearer_error}"'
    return response
