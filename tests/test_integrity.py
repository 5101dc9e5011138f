"""No data lost under faults, through a live production unit on PostgreSQL: races, killed workers, restarts."""

import os
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest
from django.db import connection

from deploy.processes import wait_until
from plants.models import Plant
from tests.live import Load, create_many, request

RACERS = 24
DUPLICATE_77 = '{"error":40003,"message":"A plant with id 77 already exists with a different name or tag."}'


def race(url: str, token: str, bodies: list[dict]) -> list[tuple]:
    start = Barrier(len(bodies))

    def post(body):
        start.wait()
        status, _, text = request(url, body, token, timeout=30)
        return status, text

    with ThreadPoolExecutor(max_workers=len(bodies)) as pool:
        return list(pool.map(post, bodies))


def test_race_of_creates_of_one_id_gives_one_200_and_clean_400s(production_unit, token):
    server = production_unit(APP_PROCESSES="3", APP_THREADS="8")
    bodies = [{"id": 77, "name": f"racer-{n}"} for n in range(RACERS)]

    results = race(f"{server.url}/plants", token, bodies)

    winners = [text for status, text in results if status == 200]
    assert len(winners) == 1
    assert sorted(results) == sorted([(200, winners[0])] + [(400, DUPLICATE_77)] * (RACERS - 1))
    stored = Plant.objects.get()
    assert winners[0] == f'{{"id":77,"name":"{stored.name}"}}'


def test_identical_concurrent_retries_all_get_200_and_store_one_plant(production_unit, token):
    server = production_unit(APP_PROCESSES="3", APP_THREADS="8")

    results = race(f"{server.url}/plants", token, [{"id": 78, "name": "Retry", "tag": "same"}] * RACERS)

    assert results == [(200, '{"id":78,"name":"Retry","tag":"same"}')] * RACERS
    assert list(Plant.objects.values_list("id", "name", "tag")) == [(78, "Retry", "same")]


def assert_every_answer_is_json(load: Load):
    answered = [answer for answer in load.answers if answer[1] is not None]
    assert answered
    assert {content_type for _, _, content_type, *_ in answered} == {"application/json"}


def test_every_plant_answered_200_is_stored_when_a_worker_is_killed(production_unit, token):
    server = production_unit(APP_PROCESSES="2", APP_THREADS="4")

    with Load(f"{server.url}/plants", token, limit=3000) as load:
        load.wait_for(1000)
        killed = server.worker_pids()[0]
        os.kill(killed, signal.SIGKILL)
        for thread in load.threads:
            thread.join(timeout=120)

    created = load.ids_with(200)
    stored = set(Plant.objects.values_list("id", flat=True))
    assert created <= stored
    assert len(created) >= 2900  # only requests in flight in the killed worker may have failed
    assert_every_answer_is_json(load)
    # The app server started a worker in the killed one's place.
    wait_until(lambda: len(set(server.worker_pids()) - {killed}) == 2, None, 30, "a worker in the killed one's place")


def pg_ctl(action: str) -> None:
    """Stop or start the test run's PostgreSQL server (scripts/with-postgres)."""
    data = os.environ["PLANTSTORE_PGDATA"]
    options = ["-m", "fast"] if action == "stop" else ["-l", os.path.join(data, "restart.log")]
    command = [f"{os.environ['PLANTSTORE_PG_BIN']}/pg_ctl", "-D", data, "-w", action, *options]
    if os.getuid() == 0:
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, timeout=60)


@pytest.mark.alone
def test_service_answers_json_during_a_postgres_restart_and_recovers(production_unit, token):
    server = production_unit(APP_PROCESSES="2", APP_THREADS="4")

    with Load(f"{server.url}/plants", token) as load:
        load.wait_for(300)
        pg_ctl("stop")
        connection.close()  # this test process's own connection died with the server
        stopped_at = time.monotonic()
        time.sleep(1)
        health_down = request(f"{server.url}/healthz")
        pg_ctl("start")
        started_at = time.monotonic()
        load.wait_for(len(load.answers) + 300, timeout=30)

    assert health_down[0] == 503
    assert health_down[2] == '{"error": 50300, "message": "The database does not answer."}'
    during = {status for *_, status, _, _, sent in load.answers if stopped_at < sent < started_at - 0.2}
    after = [status for *_, status, _, _, sent in load.answers if sent > started_at]
    assert 503 in during, "the load never met the outage"
    assert during <= {200, 503, None}  # 200: requests served before the stop took effect
    # Stale connections are noticed before use: once the server is back, no request fails.
    assert len(after) >= 300
    assert set(after) == {200}
    assert_every_answer_is_json(load)
    assert load.ids_with(200) <= set(Plant.objects.values_list("id", flat=True))


@pytest.mark.alone
def test_connections_idle_across_a_postgres_restart_are_replaced_before_use(production_unit, token):
    server = production_unit(APP_PROCESSES="2", APP_THREADS="4")
    warm = create_many(server.url, token, range(200), "warm")  # gives every server thread a connection
    assert {status for status, _ in warm} == {200}

    pg_ctl("stop")
    pg_ctl("start")
    connection.close()

    after = create_many(server.url, token, range(1000, 1200), "after")
    assert {status for status, _ in after} == {200}
