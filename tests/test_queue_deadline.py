"""A request that waited too long for an app server's thread is answered 503 at once, nothing done
(plants/middleware.py: QueueDeadlineMiddleware). nginx's stamp is sent here as nginx sends it; the
live case, every thread waiting on a silent database, is in tests/test_timeouts.py."""

import json
import logging
import time

import pytest
from django.test import override_settings

from plants.models import Plant
from tests.live import TOO_BUSY
from tests.test_metrics import METRICS_TOKEN, sample

pytestmark = pytest.mark.django_db


def stamped(seconds_ago: float) -> dict:
    """The header nginx sets (deploy/nginx.conf), as its `$msec` writes it, `seconds_ago` ago."""
    return {"HTTP_X_REQUEST_START": f"t={time.time() - seconds_ago:.3f}"}


def test_a_create_that_waited_past_half_the_database_bound_is_refused_counted_and_logged_with_nothing_stored(
    post_plant, caplog
):
    refused = {"route": "/plants", "method": "POST", "status": "503"}
    too_busy = {"route": "/plants"}
    before, too_busy_before = (
        sample("plants_http_requests_total", **refused),
        sample("plants_too_busy_total", **too_busy),
    )
    with caplog.at_level(logging.INFO, logger="plants.requests"):
        response = post_plant({"id": 1, "name": "Fern"}, **stamped(3))  # the bound: 5 s

    assert (response.status_code, response["Content-Type"]) == (503, "application/json")
    body = response.json()
    assert body["error"] == 50300
    assert 3 <= float(TOO_BUSY.fullmatch(body["message"])[1]) < 4, body
    assert not Plant.objects.exists()
    assert sample("plants_http_requests_total", **refused) - before == 1  # under its route, which the alerts read
    assert sample("plants_too_busy_total", **too_busy) - too_busy_before == 1  # apart from the store's 503s
    (line,) = [json.loads(record.getMessage()) for record in caplog.records if record.name == "plants.requests"]
    assert (line["status"], line["error"], line["message"]) == (503, 50300, body["message"])


@pytest.mark.parametrize("stamp", [2.0, -30, "t=soon", None])
def test_a_create_stamped_within_its_patience_or_without_a_usable_stamp_is_served(post_plant, stamp):
    header = stamped(stamp) if isinstance(stamp, float | int) else {"HTTP_X_REQUEST_START": stamp} if stamp else {}
    response = post_plant({"id": 2, "name": "Fern"}, **header)

    assert (response.status_code, response.json()) == (200, {"id": 2, "name": "Fern"})
    assert Plant.objects.filter(id=2).exists()


@override_settings(PLANTS_DATABASE_TIMEOUT_S=10)
def test_the_patience_is_half_the_operators_database_bound(post_plant):
    waited = [
        post_plant({"id": plant_id, "name": "Fern"}, **stamped(seconds)) for plant_id, seconds in [(3, 4), (4, 6)]
    ]

    assert [response.status_code for response in waited] == [200, 503]


def test_a_health_check_that_waited_too_long_answers_503_so_the_balancer_takes_the_unit_out(client):
    response = client.get("/healthz", **stamped(3))

    assert (response.status_code, response.json()["error"]) == (503, 50300)
    assert TOO_BUSY.fullmatch(response.json()["message"])


def test_a_metrics_scrape_is_served_however_long_it_waited(client, settings):
    # It asks no database: a scrape missed while the unit is busiest would read as the unit down.
    settings.PLANTS_METRICS_TOKEN = METRICS_TOKEN

    response = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {METRICS_TOKEN}", **stamped(30))

    assert response.status_code == 200
    assert b"plants_http_requests_total" in response.content
