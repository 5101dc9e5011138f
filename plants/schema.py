"""The published OpenAPI schema: the bearer scheme, the documented answers, and final touches."""

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema

from plants.exceptions import ERROR_CODE_DESCRIPTIONS, ErrorCode
from plants.serializers import ErrorSerializer, NewPlantSerializer, PlantSerializer

# What StrictCharField accepts: no NUL, and at least one character that is not white space,
# spelled out as Python's str.strip() knows it (ECMA-262's \s is another set). Its third rule, no
# lone surrogates, has no portable pattern (Rust's and Go's regular expressions cannot name
# surrogates): it is in the fields' descriptions, and a string of Unicode scalar values (I-JSON,
# RFC 7493) never has one.
WHITE_SPACE = r"\t\n\u000b\f\r\u001c-\u001f \u0085\u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
NON_BLANK_PATTERN = rf"^[^\u0000]*[^\u0000{WHITE_SPACE}][^\u0000]*$"
STRING_RULES = " Not only white space; no NUL characters or lone surrogates."

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


def _error(summary: str, *codes: ErrorCode) -> OpenApiResponse:
    return OpenApiResponse(ErrorSerializer, description=f"{summary}\n\nError codes:\n{_catalog(*codes)}")


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
        400: _error(
            "Unexpected error: the body is not a valid NewPlant, or the id is taken.",
            ErrorCode.MALFORMED_BODY,
            ErrorCode.INVALID_FIELD,
            ErrorCode.DUPLICATE_ID,
        ),
        401: _error(
            "No valid bearer token.",
            ErrorCode.UNAUTHENTICATED,
            ErrorCode.INVALID_TOKEN,
            ErrorCode.MALFORMED_CREDENTIALS,
        ),
        411: _error("A chunked body reached the app without nginx in front.", ErrorCode.LENGTH_REQUIRED),
        413: _error("The body is too large.", ErrorCode.BODY_TOO_LARGE),
        406: _error("The Accept header excludes application/json.", ErrorCode.NOT_ACCEPTABLE),
        415: _error("The body is not application/json.", ErrorCode.UNSUPPORTED_MEDIA_TYPE),
        429: _error(
            "Too many requests with this token, or without a valid token from this address.",
            ErrorCode.THROTTLED,
            ErrorCode.TOO_MANY_AUTHENTICATION_FAILURES,
        ),
        500: _error("An unexpected error in the service.", ErrorCode.INTERNAL_ERROR),
        503: _error("The database or the rate-limit store cannot be reached.", ErrorCode.SERVICE_UNAVAILABLE),
    },
)


def finalize_schema(result, generator, request, public):
    """drf-spectacular post-processing hook: the rules a serializer cannot express itself."""
    schemas = result["components"]["schemas"]
    schemas["Error"]["properties"]["error"]["format"] = "int32"
    schemas["NewPlant"]["additionalProperties"] = False
    for field in ("name", "tag"):
        schemas["NewPlant"]["properties"][field]["pattern"] = NON_BLANK_PATTERN
        schemas["NewPlant"]["properties"][field]["description"] += STRING_RULES
    result["info"]["description"] += "\n\n## Error codes\n\n" + _catalog(*sorted(ErrorCode))
    # The contract applies bearerAuth to the whole interface: say it once, at the top level.
    result["security"] = [{"bearerAuth": []}]
    for operations in result["paths"].values():
        for operation in operations.values():
            operation.pop("security", None)
    return result
