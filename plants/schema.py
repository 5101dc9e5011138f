"""The published OpenAPI schema: the bearer scheme, the documented answers, and final touches."""

import re

from django.core.exceptions import ImproperlyConfigured
from django.core.validators import RegexValidator
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from plants.exceptions import ERROR_CODE_DESCRIPTIONS, ErrorCode
from plants.serializers import ErrorSerializer, NewPlantSerializer, PlantSerializer, StrictCharField

# The catalog's codes the create is not documented to answer: other paths and methods (404, 405), the
# admin's (403), a Host refused before any view (40000), and nginx's own refusals. Every other code is
# listed under its status (tests/test_error_catalog.py: listed iff a POST /plants reaches it).
NOT_ANSWERED_BY_CREATE = {
    ErrorCode.BAD_REQUEST,
    ErrorCode.FORBIDDEN,
    ErrorCode.NOT_FOUND,
    ErrorCode.METHOD_NOT_ALLOWED,
    ErrorCode.URI_TOO_LONG,
    ErrorCode.HEADERS_TOO_LARGE,
    ErrorCode.NOT_IMPLEMENTED,
}
# Each status the create answers with an Error body, in a line; the codes under it are the catalog's.
ERROR_SUMMARIES = {
    400: "Unexpected error: the body is not a valid NewPlant, or the id is taken.",
    401: "No valid bearer token.",
    406: "The Accept header excludes application/json.",
    411: "A chunked body reached the app without nginx in front.",
    413: "The body is too large.",
    415: "The body is not application/json.",
    429: "Too many requests with this token, or without a valid token from this address.",
    500: "An unexpected error in the service.",
    503: "The database or the rate-limit store cannot be reached, or the request waited too long to be served.",
}

# The answers that passed through the throttle carry both (draft-ietf-httpapi-ratelimit-headers-10).
RATE_LIMITED_STATUSES = [200, 400, 413, 415, 429, 503]


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "plants.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        scheme = build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Bearer")
        scheme["description"] = "A token from `manage.py token issue NAME`: `Authorization: Bearer plnt_…`."
        return scheme


def _catalog(*codes: ErrorCode) -> str:
    return "\n".join(f"- `{int(code)}` {code.name}: {ERROR_CODE_DESCRIPTIONS[code]}" for code in codes)


def codes_answered_by_create(status: int) -> list[ErrorCode]:
    return [code for code in sorted(ErrorCode) if code // 100 == status and code not in NOT_ANSWERED_BY_CREATE]


def error_responses() -> dict[int, OpenApiResponse]:
    """The create's Error answers, by status: each lists the catalog's codes of its status."""
    statuses = sorted({code // 100 for code in ErrorCode if code not in NOT_ANSWERED_BY_CREATE})
    if missing := set(statuses) - ERROR_SUMMARIES.keys():
        raise ImproperlyConfigured(f"plants/schema.py: ERROR_SUMMARIES has no line for status {sorted(missing)}")
    return {
        status: OpenApiResponse(
            ErrorSerializer,
            description=f"{ERROR_SUMMARIES[status]}\n\nError codes:\n{_catalog(*codes_answered_by_create(status))}",
        )
        for status in statuses
    }


def published_pattern(rule: RegexValidator) -> str:
    """A field's own rule as ECMA-262 reads it: Python's \\A and \\Z anchors are ^ and $."""
    if rule.inverse_match or rule.regex.flags & ~re.UNICODE:
        raise ValueError(f"{rule.regex.pattern!r}: a pattern the schema cannot publish as it is enforced")
    return rule.regex.pattern.replace(r"\A", "^").replace(r"\Z", "$")


def publish_string_rules(schema: dict, field: StrictCharField) -> None:
    """The field's rules, which DRF's CharField cannot state, as patterns and prose."""
    own = [rule for rule in field.validators if isinstance(rule, RegexValidator)]
    schema["pattern"] = field.pattern
    if own:
        schema["allOf"] = [{"pattern": published_pattern(rule)} for rule in own]
    prose = [field.rules, *(str(rule.message) for rule in own)]
    schema["description"] = " ".join([schema["description"].rstrip(".") + ".", *prose])


create_plant_schema = extend_schema(
    operation_id="createPlant",
    summary="Create plant",
    description=(
        "Creates a new plant in the store. The id is the client's. Sending the same id, name and tag "
        "again (a retry) answers 200 with the stored plant; the same id with another name or tag is "
        "a 400 DUPLICATE_ID."
    ),
    request=NewPlantSerializer,
    parameters=[
        OpenApiParameter(
            "traceparent",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            description=(
                "W3C Trace Context (`00-<trace-id>-<parent-id>-<flags>`): a valid one makes the request a span "
                "of the caller's trace, whose id the request's log line carries. A missing or invalid one starts "
                "a new trace; it is never an error. No `traceresponse` is sent back: X-Request-ID names the request."
            ),
        ),
        OpenApiParameter(
            "tracestate",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            description="W3C Trace Context's vendor entries, kept with the trace when the service exports spans.",
        ),
        OpenApiParameter(
            "X-Request-ID",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=True,
            description=(
                "The request's id, for support and logs: the client's own X-Request-ID when it sent one of "
                "1-128 characters A-Z a-z 0-9 . _ : - , else one the service made."
            ),
        ),
        OpenApiParameter(
            "RateLimit-Policy",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=RATE_LIMITED_STATUSES,
            pattern=r'^"default";q=[1-9][0-9]*;w=[1-9][0-9]*$',
            description=(
                'The token\'s quota: `"default";q=600;w=60` is 600 requests per fixed window of 60 seconds '
                "(PLANTS_THROTTLE_RATE). On every answer to a request the throttle counted: any authenticated one "
                "while throttling is on, unless its store could not count it (503)."
            ),
        ),
        OpenApiParameter(
            "RateLimit",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=RATE_LIMITED_STATUSES,
            pattern=r'^"default";r=[0-9]+;t=[1-9][0-9]*$',
            description=(
                'What is left of the quota: `"default";r=599;t=42` is 599 more requests allowed in the '
                "42 seconds until the window resets. `r=0` once the quota is spent."
            ),
        ),
        OpenApiParameter(
            "Retry-After",
            OpenApiTypes.INT,
            OpenApiParameter.HEADER,
            response=[429],
            description=(
                "Seconds until the token's quota allows another request (the RateLimit header's `t`), or, "
                "for TOO_MANY_AUTHENTICATION_FAILURES, until this address may try again."
            ),
        ),
        OpenApiParameter(
            "WWW-Authenticate",
            OpenApiTypes.STR,
            OpenApiParameter.HEADER,
            response=[401],
            description='`Bearer realm="plants"`, with `error="invalid_token"` when the token was refused.',
        ),
    ],
    responses={
        200: OpenApiResponse(PlantSerializer, description="Plant response (plant created, or a retry of its create)"),
        **error_responses(),
    },
)


def finalize_schema(result, generator, request, public):
    """drf-spectacular post-processing hook: the rules a serializer cannot express itself."""
    schemas = result["components"]["schemas"]
    schemas["Error"]["properties"]["error"]["format"] = "int32"
    schemas["NewPlant"]["additionalProperties"] = False
    for name, field in NewPlantSerializer().fields.items():
        if isinstance(field, StrictCharField):
            publish_string_rules(schemas["NewPlant"]["properties"][name], field)
    result["info"]["description"] += "\n\n## Error codes\n\n" + _catalog(*sorted(ErrorCode))
    # The contract applies bearerAuth to the whole interface: say it once, at the top level.
    result["security"] = [{"bearerAuth": []}]
    for operations in result["paths"].values():
        for operation in operations.values():
            operation.pop("security", None)
    return result
