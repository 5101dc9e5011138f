"""Every code in the catalog is reachable: one request (or one real fault) per code, and its answer."""

import re
from pathlib import Path

import pytest
import yaml
from django.test import Client

from plants.exceptions import ErrorCode
from tests.test_edge import EDGE_REFUSALS

pytestmark = pytest.mark.django_db

ROSE = {"id": 1, "name": "Rose"}


def bad_request(reach):
    return Client().get("/healthz", HTTP_HOST="evil.example")


def malformed_body(reach):
    return reach.post_plant("{")


def invalid_field(reach):
    return reach.post_plant({"id": "1", "name": "Rose"})


def duplicate_id(reach):
    reach.post_plant(ROSE)
    return reach.post_plant({"id": 1, "name": "Tulip"})


def unauthenticated(reach):
    return reach.api_client.post("/plants", ROSE, format="json")


def invalid_token(reach):
    return reach.api_client.post("/plants", ROSE, format="json", HTTP_AUTHORIZATION="Bearer plnt_unknown")


def malformed_credentials(reach):
    return reach.api_client.post("/plants", ROSE, format="json", HTTP_AUTHORIZATION="Bearer two tokens")


def forbidden(reach):
    return Client(enforce_csrf_checks=True).post("/admin/login/", {"username": "a", "password": "b"})


def not_found(reach):
    return reach.api_client.post("/nothing-here", ROSE, format="json", **reach.auth_headers)


def method_not_allowed(reach):
    return reach.api_client.get("/plants", **reach.auth_headers)


def not_acceptable(reach):
    return reach.post_plant(ROSE, HTTP_ACCEPT="text/html")


def body_too_large(reach):
    return reach.post_plant({"id": 1, "name": "x" * 5000})


def unsupported_media_type(reach):
    return reach.post_plant(ROSE, content_type="text/plain")


def throttled(reach):
    reach.settings.PLANTS_THROTTLE_RATE = "1/day"
    reach.post_plant(ROSE)
    return reach.post_plant({"id": 2, "name": "Rose"})


def too_many_authentication_failures(reach):
    reach.settings.PLANTS_ANONYMOUS_THROTTLE_RATE = "1/day"
    reach.monkeypatch.setattr("plants.authentication_limit.refused_until", {})
    unknown = {"HTTP_AUTHORIZATION": "Bearer plnt_unknown"}
    reach.api_client.post("/plants", ROSE, format="json", **unknown)
    return reach.api_client.post("/plants", ROSE, format="json", **unknown)


def internal_error(reach):
    def explode(**kwargs):
        raise RuntimeError("a bug")

    reach.monkeypatch.setattr("plants.serializers.plant_create", explode)
    reach.api_client.raise_request_exception = False  # answer as a server would
    return reach.post_plant(ROSE)


def length_required(reach):
    # A chunked body with no Content-Length, as gunicorn hands it on without nginx in front.
    return reach.post_plant(ROSE, HTTP_TRANSFER_ENCODING="chunked", CONTENT_LENGTH="")


def service_unavailable(reach):
    # A real fault: the database refuses the write, as a server in a failover's window does (a
    # stopped Redis, the other way to it, is in tests/test_throttling.py).
    reach.post_plant({"id": 9, "name": "Rose"})  # the token's last use is written first
    reach.getfixturevalue("writes_refused")()
    return reach.post_plant(ROSE)


REACH = {
    ErrorCode.BAD_REQUEST: bad_request,
    ErrorCode.MALFORMED_BODY: malformed_body,
    ErrorCode.INVALID_FIELD: invalid_field,
    ErrorCode.DUPLICATE_ID: duplicate_id,
    ErrorCode.UNAUTHENTICATED: unauthenticated,
    ErrorCode.INVALID_TOKEN: invalid_token,
    ErrorCode.MALFORMED_CREDENTIALS: malformed_credentials,
    ErrorCode.FORBIDDEN: forbidden,
    ErrorCode.NOT_FOUND: not_found,
    ErrorCode.METHOD_NOT_ALLOWED: method_not_allowed,
    ErrorCode.NOT_ACCEPTABLE: not_acceptable,
    ErrorCode.BODY_TOO_LARGE: body_too_large,
    ErrorCode.UNSUPPORTED_MEDIA_TYPE: unsupported_media_type,
    ErrorCode.THROTTLED: throttled,
    ErrorCode.TOO_MANY_AUTHENTICATION_FAILURES: too_many_authentication_failures,
    ErrorCode.INTERNAL_ERROR: internal_error,
    ErrorCode.SERVICE_UNAVAILABLE: service_unavailable,
    ErrorCode.LENGTH_REQUIRED: length_required,
}
# Codes only nginx answers (make serve): reached by real requests in tests/test_edge.py.
ANSWERED_BY_NGINX = {ErrorCode.URI_TOO_LONG, ErrorCode.HEADERS_TOO_LARGE, ErrorCode.NOT_IMPLEMENTED}


def test_codes_only_nginx_answers_are_each_reached_by_the_edge_tests():
    assert ANSWERED_BY_NGINX <= {code for _, _, code in EDGE_REFUSALS}


def codes_the_schema_lists_for_the_create() -> set[int]:
    """The codes each Error answer of POST /plants lists in the committed openapi.yaml."""
    schema = yaml.safe_load((Path(__file__).resolve().parent.parent / "openapi.yaml").read_text())
    descriptions = [answer["description"] for answer in schema["paths"]["/plants"]["post"]["responses"].values()]
    return {int(code) for text in descriptions for code in re.findall(r"^- `(\d+)` ", text, re.MULTILINE)}


def test_codes_only_nginx_answers_are_not_listed_for_the_create():
    assert ANSWERED_BY_NGINX & codes_the_schema_lists_for_the_create() == set()


class Reach:
    """The fixtures a way of reaching a code may need."""

    def __init__(self, request, **fixtures):
        self.getfixturevalue = request.getfixturevalue
        self.__dict__.update(fixtures)


@pytest.mark.parametrize(
    "code", [code for code in ErrorCode if code not in ANSWERED_BY_NGINX], ids=lambda code: code.name
)
def test_every_catalog_code_is_reached_with_its_status_and_an_error_body(
    code, request, api_client, auth_headers, post_plant, settings, monkeypatch, tmp_path
):
    assert code in REACH, f"{code.name} has no request that reaches it: add one, or drop the code"
    reach = Reach(
        request,
        api_client=api_client,
        auth_headers=auth_headers,
        post_plant=post_plant,
        settings=settings,
        monkeypatch=monkeypatch,
        tmp_path=tmp_path,
    )

    response = REACH[code](reach)

    assert response.status_code == code // 100
    assert response["Content-Type"] == "application/json"
    body = response.json()
    assert body["error"] == code
    assert set(body) == ({"error", "message", "fields"} if code == ErrorCode.INVALID_FIELD else {"error", "message"})
    assert body["message"]
    reached_by_the_create = (response.request["REQUEST_METHOD"], response.request["PATH_INFO"]) == ("POST", "/plants")
    listed = code in codes_the_schema_lists_for_the_create()
    assert listed == reached_by_the_create, (
        f"{code.name} is reached by {response.request['REQUEST_METHOD']} {response.request['PATH_INFO']}: "
        "plants/schema.py's NOT_ANSWERED_BY_CREATE should " + ("not list it" if reached_by_the_create else "list it")
    )
