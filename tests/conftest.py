"""Shared fixtures: an API client, an issued token, and its Authorization header."""

import json

import pytest
from django.db import connection
from rest_framework.test import APIClient

from plants.services import token_issue
from tests.live import LiveGunicorn, LiveRedis, database_url


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


@pytest.fixture
def gunicorn(transactional_db, tmp_path):
    """Start gunicorn servers on the test database: `server = gunicorn(**environment)`."""
    if connection.vendor != "postgresql":
        pytest.skip("gunicorn shares the test database only on PostgreSQL (SQLite's is in memory)")
    servers = []

    def start(**env) -> LiveGunicorn:
        server = LiveGunicorn(tmp_path, DATABASE_URL=database_url(connection.settings_dict), **env)
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def redis_server():
    server = LiveRedis().start()
    yield server
    server.stop()
