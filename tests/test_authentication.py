"""Bearer authentication: who gets in, and the 401 answer everyone else gets."""

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from plants.authentication import TOKEN_SQL, token_for
from plants.models import AUTHENTICATION_FIELDS, ApiToken, Plant
from plants.services import token_issue, tokens_revoke
from tests.live import request

pytestmark = pytest.mark.django_db

CHALLENGE = 'Bearer realm="plants"'
INVALID_TOKEN_CHALLENGE = 'Bearer realm="plants", error="invalid_token"'
NOT_PROVIDED = {"error": 40100, "message": "Authentication credentials were not provided."}
MALFORMED = {"error": 40102, "message": "The Authorization header must be 'Bearer <token>', with exactly one token."}


def post(api_client, authorization=None, body='{"id": 1, "name": "Rose"}'):
    headers = {"HTTP_AUTHORIZATION": authorization} if authorization is not None else {}
    return api_client.generic("POST", "/plants", body, content_type="application/json", **headers)


def assert_refused(response, body: dict, challenge: str):
    assert response.status_code == 401
    assert response["Content-Type"] == "application/json"
    assert response["WWW-Authenticate"] == challenge
    assert response.json() == body
    assert Plant.objects.count() == 0


def test_create_without_token_returns_401_with_error_body(api_client):
    assert_refused(post(api_client), NOT_PROVIDED, CHALLENGE)


@pytest.mark.parametrize("authorization", ["Token abc", "Basic dXNlcjpwYXNz", "plnt_abc", ""])
def test_create_with_other_scheme_returns_401_not_provided(api_client, authorization):
    assert_refused(post(api_client, authorization), NOT_PROVIDED, CHALLENGE)


@pytest.mark.parametrize("authorization", ["Bearer", "Bearer  ", "Bearer one two"])
def test_bearer_without_exactly_one_token_returns_401_malformed(api_client, authorization):
    assert_refused(post(api_client, authorization), MALFORMED, CHALLENGE)


def test_unknown_token_returns_401_invalid_token(api_client, db):
    response = post(api_client, "Bearer plnt_not-a-token-we-issued")

    assert_refused(response, {"error": 40101, "message": "The token is not valid."}, INVALID_TOKEN_CHALLENGE)


def test_overlong_token_returns_401_invalid_token(api_client, db):
    response = post(api_client, "Bearer " + "x" * 4000)

    assert_refused(response, {"error": 40101, "message": "The token is not valid."}, INVALID_TOKEN_CHALLENGE)


def test_revoked_token_returns_401_on_the_next_request(api_client, token, auth_headers):
    assert post(api_client, auth_headers["HTTP_AUTHORIZATION"]).status_code == 200

    tokens_revoke(tokens=ApiToken.objects.filter(name="test-client"))
    response = post(api_client, f"Bearer {token}", body='{"id": 2, "name": "Tulip"}')

    assert response.status_code == 401
    assert response["WWW-Authenticate"] == INVALID_TOKEN_CHALLENGE
    assert response.json() == {"error": 40101, "message": "The token has been revoked."}
    assert list(Plant.objects.values_list("id", flat=True)) == [1]


def test_expired_token_returns_401_invalid_token(api_client):
    api_token, secret = token_issue(name="short-lived", expires_in=timedelta(days=1))
    ApiToken.objects.filter(pk=api_token.pk).update(expires_at=timezone.now() - timedelta(seconds=1))

    response = post(api_client, f"Bearer {secret}")

    assert_refused(response, {"error": 40101, "message": "The token has expired."}, INVALID_TOKEN_CHALLENGE)


def test_token_before_its_expiry_is_accepted(api_client):
    _, secret = token_issue(name="long-lived", expires_in=timedelta(days=1))

    response = post(api_client, f"Bearer {secret}")

    assert (response.status_code, response.json()) == (200, {"id": 1, "name": "Rose"})
    assert list(Plant.objects.values_list("id", "name")) == [(1, "Rose")]


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
def test_scheme_name_is_case_insensitive(api_client, token, scheme):
    response = post(api_client, f"{scheme} {token}")

    assert (response.status_code, response.json()) == (200, {"id": 1, "name": "Rose"})
    assert list(Plant.objects.values_list("id", "name")) == [(1, "Rose")]


def test_unauthenticated_request_with_broken_body_returns_401_not_400(api_client):
    response = post(api_client, body="{this is not json")

    assert_refused(response, NOT_PROVIDED, CHALLENGE)


def test_unauthenticated_request_with_oversized_body_returns_401(api_client):
    response = post(api_client, body='{"id": 1, "name": "%s"}' % ("x" * 100_000))

    assert_refused(response, NOT_PROVIDED, CHALLENGE)


def test_unauthenticated_get_returns_401_not_405(api_client):
    response = api_client.get("/plants")

    assert response.status_code == 401
    assert response.json() == NOT_PROVIDED


def test_use_records_last_used_at_at_most_once_a_minute(api_client, issued_token):
    api_token, secret = issued_token
    assert api_token.last_used_at is None

    post(api_client, f"Bearer {secret}")
    first_use = ApiToken.objects.get(pk=api_token.pk).last_used_at
    post(api_client, f"Bearer {secret}", body='{"id": 2, "name": "Tulip"}')
    second_use = ApiToken.objects.get(pk=api_token.pk).last_used_at

    assert first_use is not None
    assert second_use == first_use

    ApiToken.objects.filter(pk=api_token.pk).update(last_used_at=first_use - timedelta(minutes=2))
    post(api_client, f"Bearer {secret}", body='{"id": 3, "name": "Iris"}')

    assert ApiToken.objects.get(pk=api_token.pk).last_used_at > first_use


def test_the_token_s_raw_read_is_the_query_the_orm_compiles_and_loads_the_same_token(issued_token):
    token, secret = issued_token
    # As get() sends it, less its LIMIT: get() drops the model's ordering.
    orm = ApiToken.objects.only(*AUTHENTICATION_FIELDS).filter(digest=token.digest).order_by()
    sql, _ = orm.query.sql_with_params()
    table = ApiToken._meta.db_table

    read = token_for(secret)

    assert re.sub(r'["`]', "", sql).replace(f"{table}.", "") == TOKEN_SQL
    assert (read.pk, read.get_deferred_fields()) == (orm.get().pk, orm.get().get_deferred_fields())
    assert [getattr(read, name) for name in AUTHENTICATION_FIELDS] == [
        getattr(orm.get(), name) for name in AUTHENTICATION_FIELDS
    ]


def test_only_a_digest_of_the_token_is_stored(issued_token):
    api_token, secret = issued_token
    row = ApiToken.objects.filter(pk=api_token.pk).values().get()

    assert secret.startswith("plnt_")
    assert len(secret) >= 48
    assert not any(secret in str(value) for value in row.values())
    assert row["prefix"] == secret[:12]


def test_bearer_token_with_non_ascii_characters_returns_401_malformed(api_client, db):
    response = post(api_client, "Bearer plnt_caf\u00e9")

    assert_refused(response, MALFORMED, CHALLENGE)


@pytest.mark.live
def test_a_bearer_token_with_non_ascii_bytes_reaches_the_app_as_no_header_through_the_app_server(production_unit):
    server = production_unit()

    # http.client sends the header's text as Latin-1: the token's é as the byte 0xE9. Granian passes a
    # header value that is not ASCII on as empty: to the app, no token was sent (docs/api.md says so).
    status, headers, text = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token="plnt_caf\u00e9")

    assert (status, headers["WWW-Authenticate"], json.loads(text)) == (401, CHALLENGE, NOT_PROVIDED)
    assert not Plant.objects.exists()


@pytest.mark.live
def test_credentials_in_the_app_server_s_environment_are_not_a_request_s(production_unit, token):
    # Granian copies its environment into every request's WSGI environ: the unit starts it with none of its
    # settings (deploy/app_server.py), so an HTTP_* one cannot read as a header.
    server = production_unit(HTTP_AUTHORIZATION=f"Bearer {token}")

    status, headers, text = request(f"{server.url}/plants", {"id": 1, "name": "Rose"})

    assert (status, headers["WWW-Authenticate"], json.loads(text)) == (401, CHALLENGE, NOT_PROVIDED)
    assert not Plant.objects.exists()


@pytest.mark.urls("tests.urls")
def test_request_user_is_the_token_s_client_which_drf_s_permissions_read_as_no_staff_and_no_model_rights(
    api_client, token
):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    answers = {
        path: api_client.post(path, {}, format="json", **headers)
        for path in ("/test/whoami", "/test/staff-only", "/test/model-permissions")
    }

    assert {path: (answer.status_code, answer.json()) for path, answer in answers.items()} == {
        "/test/whoami": (200, {"user": "test-client", "username": "test-client"}),
        "/test/staff-only": (403, {"error": 40300, "message": "You do not have permission to perform this action."}),
        "/test/model-permissions": (
            403,
            {"error": 40300, "message": "You do not have permission to perform this action."},
        ),
    }
