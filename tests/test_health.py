"""GET /healthz (readiness: the database and the rate-limit store answer) and GET /livez (liveness), unauthenticated."""

import pytest
from django.test import Client

from localcluster.processes import free_port
from tests.live import live_unit, request


@pytest.mark.django_db
def test_health_returns_200_without_authentication():
    response = Client().get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
def test_liveness_returns_200_without_authentication():
    response = Client().get("/livez")

    assert (response.status_code, response["Content-Type"]) == (200, "application/json")
    assert response.json() == {"status": "ok"}


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/livez"])
def test_health_with_other_method_returns_405_with_allow(path):
    response = Client().post(path)

    assert response.status_code == 405
    assert response["Allow"] == "GET, HEAD"
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}


@pytest.mark.django_db
def test_health_post_is_405_even_with_csrf_checks_on():
    response = Client(enforce_csrf_checks=True).post("/healthz")

    assert response.status_code == 405
    assert response.json() == {"error": 40500, "message": "Method POST not allowed."}


def assert_unready(response, message: str):
    assert (response.status_code, response["Content-Type"]) == (503, "application/json")
    assert response.json() == {"error": 50300, "message": message}


@pytest.mark.django_db
def test_health_is_200_while_redis_is_stopped_when_the_limits_fail_open(settings, counting_in_redis):
    settings.PLANTS_THROTTLE_RATE = "10/minute"
    counting_in_redis.stop()

    response = Client().get("/healthz")

    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.django_db
def test_health_is_503_while_redis_is_stopped_when_the_limits_fail_closed_and_liveness_stays_200(
    settings, counting_in_redis
):
    settings.PLANTS_THROTTLE_RATE = "10/minute"
    settings.PLANTS_RATE_LIMIT_FAILURE_MODE = "closed"
    redis_server = counting_in_redis
    client = Client()
    assert client.get("/healthz").json() == {"status": "ok"}

    redis_server.stop()
    assert_unready(client.get("/healthz"), "The rate-limit store does not answer.")
    assert (client.get("/livez").status_code, client.get("/livez").json()) == (200, {"status": "ok"})

    redis_server.start()  # the same port: the service's client reconnects by itself
    response = client.get("/healthz")
    assert (response.status_code, response.json()) == (200, {"status": "ok"})


@pytest.mark.live
def test_health_names_both_dependencies_when_neither_answers(tmp_path):
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    no_redis = f"redis://127.0.0.1:{free_port()}/0"
    server = live_unit(
        tmp_path,
        DATABASE_URL=unreachable,
        REDIS_URL=no_redis,
        PLANTS_THROTTLE_RATE="10/minute",
        PLANTS_RATE_LIMIT_FAILURE_MODE="closed",
    )
    server.start()
    try:
        health, liveness = request(f"{server.url}/healthz"), request(f"{server.url}/livez")
    finally:
        server.stop()

    assert health[0] == 503
    assert health[2] == '{"error": 50300, "message": "The database and the rate-limit store do not answer."}'
    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
