"""Per-token throttling: 429 with Retry-After past the rate, counted in the cache (Redis when set)."""

import re

import pytest
from django.core.cache import cache

from plants.models import Plant
from plants.services import token_issue
from tests.live import request

pytestmark = pytest.mark.django_db

# An hourly window: a test never straddles two windows unless it runs across the hour.
RATE = "3/hour"


@pytest.fixture
def throttled(settings):
    settings.PLANTS_THROTTLE_RATE = RATE
    cache.clear()
    yield
    cache.clear()


def test_request_over_the_rate_returns_429_with_retry_after_and_stores_nothing(throttled, post_plant):
    for plant_id in range(3):
        assert post_plant({"id": plant_id, "name": "Rose"}).status_code == 200

    response = post_plant({"id": 99, "name": "Rose"})

    assert response.status_code == 429
    retry_after = int(response["Retry-After"])
    assert 1 <= retry_after <= 3600
    assert response.json() == {
        "error": 42900,
        "message": f"Request was throttled. Expected available in {retry_after} seconds.",
    }
    assert not Plant.objects.filter(id=99).exists()


def test_throttle_counts_each_token_separately(throttled, post_plant, api_client):
    for plant_id in range(4):
        post_plant({"id": plant_id, "name": "Rose"})
    _, other_secret = token_issue(name="other-client")

    response = api_client.post(
        "/plants", {"id": 50, "name": "Tulip"}, format="json", HTTP_AUTHORIZATION=f"Bearer {other_secret}"
    )

    assert response.status_code == 200


def test_empty_rate_turns_throttling_off(settings, post_plant):
    settings.PLANTS_THROTTLE_RATE = ""

    statuses = {post_plant({"id": plant_id, "name": "Rose"}).status_code for plant_id in range(10)}

    assert statuses == {200}


def test_two_app_servers_share_one_limit_through_redis(gunicorn, redis_server, token):
    environment = {"REDIS_URL": redis_server.url, "PLANTS_THROTTLE_RATE": "5/hour"}
    first, second = gunicorn(**environment), gunicorn(**environment)

    statuses = [
        request(f"{server.url}/plants", {"id": plant_id, "name": "Rose"}, token)[0]
        for plant_id, server in enumerate([first, second, first, second, first, second, first])
    ]

    assert statuses == [200, 200, 200, 200, 200, 429, 429]
    status, headers, text = request(f"{second.url}/plants", {"id": 100, "name": "Rose"}, token)
    assert status == 429
    assert re.fullmatch(r"\d+", headers["Retry-After"])
    assert Plant.objects.count() == 5
