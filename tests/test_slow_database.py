"""A slow database: 200 ms (with jitter) added to every round trip to PostgreSQL, creates still answer 200, each
slower by its round trips and no more, and no timeout fires (the bound, PLANTS_DATABASE_TIMEOUT_S, is 5 s).

netem (`tc qdisc add dev lo root netem delay 100ms 20ms`, the usual way to slow a link) is not in every
kernel, and not in this machine's ("Specified qdisc kind is unknown"): a relay of the test's own
(tests/faults.py's DelayingRelay) sits between the unit and PostgreSQL and adds the same delay to each
statement and each answer, and counts the round trips. What it leaves out, the TCP handshake and
acknowledgements that its own kernel answers, carries no statement.

Both tests are `alone`: they bound each request's time within MARGIN_S of what the delay adds, which
other tests' servers sharing the CPU would blur; they run once, in the PostgreSQL pass, by themselves.
"""

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
# .env.example counts) and the INSERT, each its own round trip in autocommit (tests/test_create_plant.py
# pins the three statements). The health check before a kept connection is reused asks nothing of the
# server (plants/postgresql/base.py).
CREATE_ROUND_TRIPS = 3
# /healthz: one SELECT 1.
HEALTH_ROUND_TRIPS = 1
# What the delay leaves out of a request's time: the kernel's and Granian's scheduling beside other
# processes, the relay's own threads, the test's client.
MARGIN_S = 0.2

pytestmark = pytest.mark.alone


class SlowDatabase:
    """A production unit whose database is behind `relay`, with a token in service, and what a create
    takes there without the delay: the median and the slowest, on a kept connection and on a new one
    (`baselines`); each worker thread opens a new connection at its next request."""

    def __init__(self, server, secret: str, relay: DelayingRelay, baselines: dict[str, list[float]]):
        self.server, self.secret, self.relay, self.baselines = server, secret, relay, baselines
        self.baseline = statistics.median(baselines["kept"])
        self.setup = connect_round_trips()

    def within_its_round_trips(
        self, elapsed: float, round_trips: int, connecting: bool = False, at_most: int | None = None
    ) -> bool:
        """Whether a request that made `round_trips` (or up to `at_most`) took what the delay adds to them,
        and no more than the slowest such request without the delay (as the machine serves it now) plus MARGIN_S."""
        lowest, highest = round_trips * ROUND_TRIP_ADDED_S[0], (at_most or round_trips) * ROUND_TRIP_ADDED_S[1]
        return lowest < elapsed < max(self.baselines["connecting" if connecting else "kept"]) + highest + MARGIN_S


def connect_round_trips() -> int:
    """What a worker thread's new connection costs (DJANGO_CONN_MAX_AGE keeps it 60 s after): libpq's
    SSL request (sslmode=prefer; refused here), the startup and authentication (trust: one; SCRAM
    would add two), and Django's SET of TimeZone unless the server's already is Django's."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT reset_val FROM pg_settings WHERE name = 'TimeZone'")
        (server_time_zone,) = cursor.fetchone()
    return 2 + (server_time_zone != settings.TIME_ZONE)


@pytest.fixture
def slow_database(production_unit):
    """The test database's server behind a delaying relay, under a production unit as .env.example
    configures it (the rate-limit count in the database included). Without the delay, each worker
    serves creates (its first requests load the code a create runs), then the baselines are taken:
    creates on kept connections from 4 clients at once, then, once the relay has ended every connection (as a restart of the
    database or DJANGO_CONN_MAX_AGE ends them), creates that connect anew. Then the relay ends every
    connection again and the delay is on. Every connection is closed after the test, whatever happens."""
    relay = DelayingRelay(unix_socket_or_address(connection.settings_dict))
    try:
        url = database_url({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": relay.port})
        server = production_unit(DATABASE_URL=url, PLANTS_THROTTLE_RATE=DEPLOYED_SETTINGS["PLANTS_THROTTLE_RATE"])
        token, secret = token_issue(name="slow-database")
        # A token in service: its last use was recorded within the minute, so no create records it
        # again (an UPDATE once a minute per token: a round trip more for that one create).
        ApiToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        assert [status for status, _ in create_many(server.url, secret, range(1, 17), "Fern")] == [200] * 16
        with ThreadPoolExecutor(max_workers=4) as clients:  # as many at once as the tests send
            kept = list(clients.map(lambda plant_id: create(server.url, secret, plant_id), range(17, 37)))
        relay.end_connections()
        with ThreadPoolExecutor(max_workers=8) as clients:  # every thread opens a connection, or most
            connecting = list(clients.map(lambda plant_id: create(server.url, secret, plant_id), range(37, 45)))
        assert [status for status, *_ in kept + connecting] == [200] * 28
        relay.end_connections()
        relay.delay = DELAY_S
        baselines = {"kept": [elapsed for *_, elapsed in kept], "connecting": [elapsed for *_, elapsed in connecting]}
        yield SlowDatabase(server, secret, relay, baselines)
    finally:
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


def test_slow_database_answers_each_create_200_later_by_exactly_its_round_trips(slow_database):
    slow, url = slow_database, slow_database.server.url
    # One at a time. No worker thread has a connection: the first create (at least) opens one.
    one_by_one = [counted(slow.relay, f"{url}/plants", {"id": n, "name": "Fern"}, slow.secret) for n in range(101, 111)]
    health = counted(slow.relay, f"{url}/healthz")
    times, round_trips = [round(elapsed, 3) for *_, elapsed, _, _ in one_by_one], [n for *_, n in one_by_one]
    log.info(
        "baseline %.3f s; one by one %s s, %s round trips; /healthz %.3f s",
        slow.baseline,
        times,
        round_trips,
        health[2],
    )

    for plant_id, (status, text, elapsed, opened, made) in enumerate(one_by_one, start=101):
        assert (status, json.loads(text)) == (200, created(plant_id))
        assert made == CREATE_ROUND_TRIPS + slow.setup * opened and opened in (0, 1)
        assert slow.within_its_round_trips(elapsed, made, connecting=bool(opened)), (elapsed, made)
    assert one_by_one[0][3] == 1
    # On average a round trip gains 200 ms: a create on a kept connection, 600 ms.
    added = statistics.mean(elapsed for *_, elapsed, opened, _ in one_by_one if not opened) - slow.baseline
    assert CREATE_ROUND_TRIPS * 0.18 < added < CREATE_ROUND_TRIPS * 0.22 + MARGIN_S / 2, added
    status, text, elapsed, opened, made = health
    assert (status, text, made) == (200, '{"status": "ok"}', HEALTH_ROUND_TRIPS + slow.setup * opened)
    assert slow.within_its_round_trips(elapsed, made, connecting=bool(opened)), (elapsed, made)
    assert set(Plant.objects.values_list("id", flat=True)) == {*range(1, 45), *range(101, 111)}
    assert "database unavailable" not in slow.server.log()


def test_slow_database_answers_four_clients_creates_200_each_later_by_its_round_trips_and_no_timeout_fires(
    slow_database,
):
    slow, ids = slow_database, range(101, 141)
    connections, round_trips = slow.relay.counts()
    with ThreadPoolExecutor(max_workers=4) as clients:
        at_once = list(clients.map(lambda plant_id: create(slow.server.url, slow.secret, plant_id), ids))
    opened, made = slow.relay.counts()[0] - connections, slow.relay.counts()[1] - round_trips
    log.info(
        "baselines %s s; at once %s s; %d connections opened",
        {name: [round(t, 3) for t in times] for name, times in slow.baselines.items()},
        [round(t, 3) for *_, t in at_once],
        opened,
    )

    assert [(status, json.loads(text)) for status, text, _ in at_once] == [(200, created(n)) for n in ids]
    # Each create's round trips, and a connection's setup for each connection a thread opened; and one
    # more for a statement the first time a connection prepares it (psycopg, past its 5th use there:
    # when DJANGO_DB_PREPARED_STATEMENTS is on), at most once per statement and connection.
    unprepared = CREATE_ROUND_TRIPS * len(ids) + slow.setup * opened
    assert unprepared <= made <= unprepared + CREATE_ROUND_TRIPS * opened and 1 <= opened <= 8
    # Each took what a create on a kept connection takes, or one that connects or prepares (a round trip
    # more at least; at most a connection's setup and each statement prepared): no more of those than
    # connected, and than the round trips the preparing added.
    connecting = [t for *_, t in at_once if not slow.within_its_round_trips(t, CREATE_ROUND_TRIPS)]
    most = CREATE_ROUND_TRIPS + slow.setup + CREATE_ROUND_TRIPS
    assert all(
        slow.within_its_round_trips(t, CREATE_ROUND_TRIPS + 1, connecting=True, at_most=most) for t in connecting
    ), ([round(t, 3) for t in connecting], most)
    assert len(connecting) <= opened + (made - unprepared)
    assert set(Plant.objects.values_list("id", flat=True)) == {*range(1, 45), *ids}
    assert "database unavailable" not in slow.server.log()
