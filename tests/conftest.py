"""Shared fixtures: an API client, an issued token, and its Authorization header."""

import json

import pytest
from rest_framework.test import APIClient

from plants.services import token_issue


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def issued_token(db) -> tuple:
    """A (ApiToken, secret) pair."""
    return token_issue(name="test-client")


@pytest.fixture
def token(issued_token) -> str:
    return issued_token[1]


@pytest.fixture
def auth_headers(token) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def post_plant(api_client, auth_headers):
    """POST a JSON body (a dict, or raw bytes/str sent as is) to /plants with a valid token."""

    def post(body, content_type="application/json", **headers):
        if not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        return api_client.generic("POST", "/plants", body, content_type=content_type, **{**auth_headers, **headers})

    return post
