"""Concurrent creates of one id through a live server: exactly one wins, the rest are clean 400s."""

import json
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from django.db import connection

from plants.models import Plant

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="a write race needs PostgreSQL"),
]

RACERS = 16


def post_json(url: str, body: dict, token: str) -> tuple[int, dict]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def race(url: str, token: str, bodies: list[dict]) -> list[tuple[int, dict]]:
    start = Barrier(len(bodies))

    def run(body):
        start.wait()
        return post_json(url, body, token)

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(run, bodies))


def test_concurrent_creates_of_one_id_give_one_200_and_duplicate_400s(live_server, token):
    bodies = [{"id": 77, "name": f"racer-{n}"} for n in range(RACERS)]

    results = race(f"{live_server.url}/plants", token, bodies)

    winners = [body for status, body in results if status == 200]
    losers = [(status, body) for status, body in results if status != 200]
    assert len(winners) == 1
    assert losers == [
        (400, {"error": 40003, "message": "A plant with id 77 already exists with a different name or tag."})
    ] * (RACERS - 1)
    stored = Plant.objects.get()
    assert {"id": stored.id, "name": stored.name} == winners[0]


def test_concurrent_identical_retries_all_get_200_and_store_one_plant(live_server, token):
    bodies = [{"id": 78, "name": "Retry", "tag": "same"}] * RACERS

    results = race(f"{live_server.url}/plants", token, bodies)

    assert results == [(200, {"id": 78, "name": "Retry", "tag": "same"})] * RACERS
    assert list(Plant.objects.values_list("id", "name", "tag")) == [(78, "Retry", "same")]
