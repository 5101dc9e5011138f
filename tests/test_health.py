"""GET /healthz: unauthenticated, 200 while the database answers, 503 with an Error body when not."""

import pytest
from django.test import Client

from tests.live import live_unit, request


@pytest.mark.django_db
def test_health_returns_200_without_authentication():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_health_with_other_method_returns_405_with_allow():
    response = Client().post("/healthz")

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}


def test_unreachable_database_gives_503_error_bodies_not_html(tmp_path):
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    server = live_unit(tmp_path, DATABASE_URL=unreachable).start(expect_health=503)
    try:
        health = request(f"{server.url}/healthz")
        create = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token="plnt_anything")
    finally:
        server.stop()

    assert (health[0], health[1]["Content-Type"]) == (503, "application/json")
    assert health[2] == '{"error": 50300, "message": "The database does not answer."}'
    assert (create[0], create[1]["Content-Type"]) == (503, "application/json")
    assert create[2] == '{"error":50300,"message":"The service cannot reach its database; retry later."}'


@pytest.mark.django_db
def test_health_post_is_405_even_with_csrf_checks_on():
    response = Client(enforce_csrf_checks=True).post("/healthz")

    assert response.status_code == 405
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}
