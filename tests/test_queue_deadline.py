"""A request that waited too long for an app server's thread is answered 503 at once, nothing done
(plants/middleware.py: QueueDeadlineMiddleware). nginx's stamp is sent here as nginx sends it; the
live case, every thread waiting on a silent database, is in tests/test_timeouts.py."""

import json
import logging
import time

import pytest
from django.test import override_settings

from plants.models import Plant

pytestmark = pytest.mark.django_db


def stamped(seconds_ago: float) -> dict:
    """The header nginx sets (deploy/nginx.conf), as its `$msec` writes it, `seconds_ago` ago."""
    return {"HTTP_X_REQUEST_START": f"t={time.time() - seconds_ago:.3f}"}


def test_a_create_that_waited_past_half_the_database_bound_is_refused_with_nothing_stored(post_plant, caplog):
    with caplog.at_level(logging.INFO, logger="plants.requests"):
        response = post_plant({"id": 1, "name": "Fern"}, **stamped(2.6))  # the bound: 5 s

    assert (response.status_code, response["Content-Type"]) == (503, "application/json")
    body = response.json()
    assert body["error"] == 50300
    assert body["message"].startswith("The service is too busy: the request waited 2.6 s to be served")
    assert body["message"].endswith("; retry later.")
    assert not Plant.objects.exists()
    (line,) = [json.loads(record.getMessage()) for record in caplog.records if record.name == "plants.requests"]
    assert (line["status"], line["error"], line["message"]) == (503, 50300, body["message"])


@pytest.mark.parametrize("stamp", [2.4, -30, "t=soon", None])
def test_a_create_stamped_within_its_patience_or_without_a_usable_stamp_is_served(post_plant, stamp):
    header = stamped(stamp) if isinstance(stamp, (int, float)) else {"HTTP_X_REQUEST_START": stamp} if stamp else {}
    response = post_plant({"id": 2, "name": "Fern"}, **header)

    assert (response.status_code, response.json()) == (200, {"id": 2, "name": "Fern"})
    assert Plant.objects.filter(id=2).exists()


@override_settings(PLANTS_DATABASE_TIMEOUT_S=10)
def test_the_patience_is_half_the_operators_database_bound(post_plant):
    waited = [
        post_plant({"id": plant_id, "name": "Fern"}, **stamped(seconds)) for plant_id, seconds in [(3, 4.5), (4, 5.5)]
    ]

    assert [response.status_code for response in waited] == [200, 503]


def test_a_health_check_that_waited_too_long_answers_503_so_the_balancer_takes_the_unit_out(client):
    response = client.get("/healthz", **stamped(3))

    assert response.status_code == 503
    assert response.json()["error"] == 50300
