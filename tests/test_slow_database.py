"""A slow database: 200 ms (with jitter) added to every round trip to PostgreSQL, creates still answer 200, each
slower by its round trips and no more, and no timeout fires (the bound, PLANTS_DATABASE_TIMEOUT_S, is 5 s)."""

import json
import logging
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.conf import settings
from django.db import connection
from django.utils import timezone

from plants.models import ApiToken, Plant
from plants.services import token_issue
from tests.faults import DelayingRelay, unix_socket_or_address
from tests.live import DEPLOYED_SETTINGS, create_many, database_url, request

log = logging.getLogger(__name__)  # the times measured: pytest --log-cli-level=INFO
# Added in each direction, per chunk of bytes: a round trip gains 160 to 240 ms, 200 ms on average.
DELAY_S = (0.08, 0.12)
ROUND_TRIP_ADDED_S = (2 * DELAY_S[0], 2 * DELAY_S[1])
# A create on a kept connection: the token's SELECT, the rate-limit count (the database's upsert, as
# .env.example counts) and the INSERT, each its own round trip in autocommit
# (tests/test_create_plant.py pins the three statements). The health check before a kept connection is
# reused asks nothing of the server (plants/postgresql/base.py).
CREATE_ROUND_TRIPS = 3
# /healthz: one SELECT 1.
HEALTH_ROUND_TRIPS = 1
# What the delay leaves out of a request's time: the kernel's and Granian's scheduling beside other
# processes, the relay's own threads, the test's client.
MARGIN_S = 0.2


def connect_round_trips() -> int:
    """What a worker thread's new connection costs (DJANGO_CONN_MAX_AGE keeps it 60 s after): libpq's
    SSL request (sslmode=prefer; refused here), the startup and authentication (trust: one; SCRAM
    would add two), and Django's SET of TimeZone unless the server's already is Django's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reset_val FROM pg_settings WHERE name = 'TimeZone'")
        (server_time_zone,) = cursor.fetchone()
    return 2 + (server_time_zone != settings.TIME_ZONE)


@pytest.fixture
def relayed_database():
    """The test database's server behind a delaying relay (no delay until a test sets one); its
    URL, then the relay. Every connection is closed after the test, whatever happens."""
    relay = DelayingRelay(unix_socket_or_address(connection.settings_dict))
    yield database_url({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": relay.port}), relay
    relay.close()


def counted(relay: DelayingRelay, url: str, body=None, token: str | None = None) -> tuple:
    """(status, text, seconds to the answer, connections opened, round trips made) of one request,
    alone in flight: the relay's counts are its own."""
    connections, round_trips = relay.counts()
    started = time.monotonic()
    status, _, text = request(url, body, token)
    elapsed = time.monotonic() - started
    connections_after, round_trips_after = relay.counts()
    return status, text, elapsed, connections_after - connections, round_trips_after - round_trips


def create(url: str, secret: str, plant_id: int) -> tuple[int, str, float]:
    started = time.monotonic()
    status, _, text = request(f"{url}/plants", {"id": plant_id, "name": "Fern"}, secret)
    return status, text, time.monotonic() - started


def created(plant_id: int) -> dict:
    return {"id": plant_id, "name": "Fern"}  # no tag: none is sent, and none is answered


# alone: it bounds each request's time to within MARGIN_S of what the delay adds, which other tests'
# servers sharing the CPU would blur; it runs once, in the PostgreSQL pass, by itself.
@pytest.mark.alone
def test_slow_database_answers_every_create_200_slower_by_its_round_trips_and_no_more(
    production_unit, relayed_database
):
    """netem (`tc qdisc add dev lo root netem delay 100ms 20ms`, the usual way to slow a link) is not in
    every kernel, and not in this machine's; the relay (tests/faults.py) adds the same delay to each
    statement and answer. What it leaves out, the TCP handshake and acknowledgements, costs no statement."""
    url, relay = relayed_database
    # The production unit as .env.example configures it, the rate-limit count in the database included.
    server = production_unit(DATABASE_URL=url, PLANTS_THROTTLE_RATE=DEPLOYED_SETTINGS["PLANTS_THROTTLE_RATE"])
    token, secret = token_issue(name="slow-database")
    # A token in service: its last use was recorded within the minute, so no create records it again
    # (an UPDATE once a minute per token: a round trip more for that one create). The test takes under a minute.
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
    started, setup = time.monotonic(), connect_round_trips()
    # Each worker's first requests load the code a create runs; then the connections the worker
    # threads keep end (as a restart of the database, or DJANGO_CONN_MAX_AGE, ends them).
    assert [status for status, _ in create_many(server.url, secret, range(1, 17), "Fern")] == [200] * 16
    relay.end_connections()
    relay.delay = DELAY_S
    # One at a time. No worker thread has a connection: the first create (at least) opens one.
    one_by_one = [counted(relay, f"{server.url}/plants", {"id": n, "name": "Fern"}, secret) for n in range(101, 111)]
    health = counted(relay, f"{server.url}/healthz")
    # Then 4 clients at once, 8 creates each.
    connections, round_trips = relay.counts()
    with ThreadPoolExecutor(max_workers=4) as clients:
        at_once = list(clients.map(lambda plant_id: create(server.url, secret, plant_id), range(111, 143)))
    connections_opened = relay.counts()[0] - connections
    round_trips_made = relay.counts()[1] - round_trips
    # The same creates without the delay, on the connections the threads now keep.
    relay.delay = (0, 0)
    baseline = statistics.median(create(server.url, secret, plant_id)[2] for plant_id in range(143, 163))
    took = time.monotonic() - started

    log.info(
        "baseline %.3f s; one by one %s s (%s round trips); at once %.3f to %.3f s, %d connections opened",
        baseline,
        [round(elapsed, 3) for *_, elapsed, _, _ in one_by_one],
        [made for *_, made in one_by_one],
        min(elapsed for *_, elapsed in at_once),
        max(elapsed for *_, elapsed in at_once),
        connections_opened,
    )
    assert took < 60
    for plant_id, (status, text, elapsed, opened, made) in enumerate(one_by_one, start=101):
        assert (status, json.loads(text)) == (200, created(plant_id))
        assert made == CREATE_ROUND_TRIPS + setup * opened and opened in (0, 1)
        assert made * ROUND_TRIP_ADDED_S[0] < elapsed < baseline + made * ROUND_TRIP_ADDED_S[1] + MARGIN_S
    assert one_by_one[0][3] == 1
    kept = [elapsed for *_, elapsed, opened, _ in one_by_one if not opened]
    # On average a round trip gains 200 ms: the creates on kept connections, 600 ms.
    added = statistics.mean(kept) - baseline
    assert CREATE_ROUND_TRIPS * 0.18 < added < CREATE_ROUND_TRIPS * 0.22 + MARGIN_S / 2, added
    status, text, elapsed, opened, made = health
    assert (status, text, made) == (200, '{"status": "ok"}', HEALTH_ROUND_TRIPS + setup * opened)
    assert made * ROUND_TRIP_ADDED_S[0] < elapsed < baseline + made * ROUND_TRIP_ADDED_S[1] + MARGIN_S
    # At once: each create's round trips, and one connection's setup for each a thread opened.
    assert [(status, json.loads(text)) for status, text, _ in at_once] == [(200, created(n)) for n in range(111, 143)]
    assert round_trips_made == CREATE_ROUND_TRIPS * len(at_once) + setup * connections_opened
    kept_bound = baseline + CREATE_ROUND_TRIPS * ROUND_TRIP_ADDED_S[1] + MARGIN_S
    opening_bound = baseline + (CREATE_ROUND_TRIPS + setup) * ROUND_TRIP_ADDED_S[1] + MARGIN_S
    assert all(CREATE_ROUND_TRIPS * ROUND_TRIP_ADDED_S[0] < elapsed < opening_bound for *_, elapsed in at_once)
    assert len([elapsed for *_, elapsed in at_once if elapsed >= kept_bound]) <= connections_opened
    assert set(Plant.objects.values_list("id", flat=True)) == {*range(1, 17), *range(101, 163)}
    assert "database unavailable" not in server.log()
