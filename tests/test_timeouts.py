"""Bounded waits: with the database or Redis cut off (packets dropped), a request is answered 503 within
the bound (PLANTS_DATABASE_TIMEOUT_S, 5 s), /livez stays 200, and the unit serves again after the heal."""

import json
import math
import sqlite3
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from deploy.processes import ROOT
from plants import timeouts
from plants.models import Plant
from plants.services import token_issue
from tests.faults import Forwarder, dropped_packets, unix_socket_or_address
from tests.live import TOO_BUSY, database_url, live_env, live_unit, request
from tests.test_settings import SECRET_KEY, manage_check

BOUND_S = timeouts.DEFAULT_DATABASE_TIMEOUT_S
# What the bound leaves out: the kernel's and Granian's scheduling, nginx, the test's own client.
MARGIN_S = 1.5
DATABASE_DOWN = '{"error":50300,"message":"The service cannot reach its database; retry later."}'
STORE_DOWN = '{"error":50300,"message":"The service cannot reach its rate-limit store; retry later."}'


def timed(function, *args, **kwargs) -> tuple[float, tuple]:
    started = time.monotonic()
    answer = function(*args, **kwargs)
    return time.monotonic() - started, answer


def test_postgresql_connection_gets_every_timeout_from_the_bound():
    options = timeouts.postgresql_options({}, "db.example.com", 5)

    assert options == {
        "connect_timeout": 5,
        "tcp_user_timeout": 5000,
        "keepalives": 1,
        "keepalives_idle": 1,
        "keepalives_interval": 1,
        "keepalives_count": 4,
    }
    # No startup parameter (`options`): a PgBouncer refuses the connection unless told to drop it.
    # The lock bound is the database's own lock_timeout (tests/test_lock_timeout.py).
    assert timeouts.lock_timeout_ms(5) == 4000


def test_failover_url_s_hosts_share_the_connect_bound_and_its_own_values_win():
    url_options = {"host": "db1,db2", "connect_timeout": "3", "options": "-c search_path=plants"}

    assert timeouts.postgresql_options({"host": "db1,db2"}, "", 5)["connect_timeout"] == 2
    options = timeouts.postgresql_options(url_options, "", 5)
    assert options["connect_timeout"] == "3"
    assert options["options"] == "-c search_path=plants"


def test_sqlite_waits_for_a_lock_at_most_the_bound():
    assert timeouts.sqlite_options({}, 5) == {"timeout": 5}


def test_start_with_a_database_timeout_under_2_s_fails_naming_the_variable():
    result = manage_check(DJANGO_SECRET_KEY=SECRET_KEY, PLANTS_DATABASE_TIMEOUT_S="1")

    assert result.returncode != 0
    assert "PLANTS_DATABASE_TIMEOUT_S must be at least 2 (libpq's smallest connect_timeout), not 1." in result.stderr


PAST_NGINX_S_WAIT = (
    "PLANTS_DATABASE_TIMEOUT_S is 20: a request could take 34 s, and nginx answers 503 after 30 s while the app "
    "may still store it; at most 16 to serve (a one-off command may have more)"
)


def test_a_served_app_server_with_a_database_bound_nginx_would_cut_off_is_refused_naming_the_variable(tmp_path):
    socket_path = tmp_path / "app.sock"
    command = [sys.executable, "-m", "deploy.app_server", str(socket_path)]  # the systemd slot's ExecStart=

    refused = subprocess.run(command, cwd=ROOT, env=live_env(PLANTS_DATABASE_TIMEOUT_S="20"), capture_output=True)

    assert (refused.returncode, refused.stderr.decode()) == (1, PAST_NGINX_S_WAIT + "\n")
    assert not socket_path.exists()


def test_the_largest_database_bound_a_unit_serves_with_is_answered_before_nginx_gives_up():
    from deploy.app_server import NGINX_READ_TIMEOUT_S, granian_command, longest_answer_s

    served = granian_command(live_env(PLANTS_DATABASE_TIMEOUT_S="16"))
    with pytest.raises(RuntimeError, match="PLANTS_DATABASE_TIMEOUT_S is 17: a request could take 30 s, .* at most 16"):
        granian_command(live_env(PLANTS_DATABASE_TIMEOUT_S="17"))

    # Half the bound in the queue, the bound on the database, 2 s twice on a silent Redis: 29.5 s.
    assert longest_answer_s(16) == math.ceil(0.5 * 16 + 16 + 2 + 2) < NGINX_READ_TIMEOUT_S
    assert served[-1] == "plantstore_site.wsgi:application"


@pytest.mark.parametrize("through_pgbouncer", [False, True], ids=["direct", "pgbouncer"])
def test_lock_timeout_reaches_postgresql_directly_and_through_pgbouncer_and_statements_are_not_cut(
    pgbouncer, through_pgbouncer
):
    settings_dict = connection.settings_dict
    if through_pgbouncer:
        address = {"host": "127.0.0.1", "port": pgbouncer.port}
    else:
        address = {"host": settings_dict["HOST"], "port": settings_dict["PORT"] or 5432}
    options = timeouts.postgresql_options({}, address["host"], BOUND_S)

    with psycopg.connect(dbname=settings_dict["NAME"], user=settings_dict["USER"], **address, **options) as session:
        assert session.execute("SHOW lock_timeout").fetchone() == ("4s",)
        # statement_timeout would cancel a commit's wait for a synchronous standby and report it done.
        assert session.execute("SHOW statement_timeout").fetchone() == ("0",)


@pytest.fixture
def forwarded_database():
    """A loopback TCP port forwarded to the test database's server; its URL, then its port."""
    forwarder = Forwarder(unix_socket_or_address(connection.settings_dict))
    url = database_url({**connection.settings_dict, "HOST": "127.0.0.1", "PORT": forwarder.port})
    yield url, forwarder.port
    forwarder.close()


def test_database_packets_dropped_answers_503_within_the_bound_and_serves_again_after_the_heal(
    production_unit, forwarded_database
):
    url, port = forwarded_database
    server = production_unit(DATABASE_URL=url)
    _, secret = token_issue(name="timeouts")
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    assert [create(plant_id)[0] for plant_id in range(1, 9)] == [200] * 8  # workers hold connections

    with dropped_packets(port), ThreadPoolExecutor(max_workers=3) as clients:
        creates = [clients.submit(timed, create, plant_id) for plant_id in range(11, 14)]
        liveness = timed(request, f"{server.url}/livez")
        creates_were_waiting = not any(future.done() for future in creates)
        created = [future.result() for future in creates]
        health = timed(request, f"{server.url}/healthz")
        later = timed(create, 14)
        connecting = timed(connect_error, url)
    healed = time.monotonic()
    while (answer := create(15))[0] != 200 and time.monotonic() < healed + BOUND_S:
        pass
    served_again_after = time.monotonic() - healed

    assert (liveness[1][0], liveness[1][2]) == (200, '{"status": "ok"}')
    assert liveness[0] < 1 and creates_were_waiting
    for elapsed, (status, headers, text) in [*created, later]:
        assert (status, headers["Content-Type"], text) == (503, "application/json", DATABASE_DOWN)
        assert elapsed < BOUND_S + MARGIN_S
    assert (health[1][0], health[1][2]) == (503, '{"error": 50300, "message": "The database does not answer."}')
    assert health[0] < BOUND_S + MARGIN_S
    assert isinstance(connecting[1], psycopg.OperationalError)  # a new connection, as a worker makes it
    assert connecting[0] < BOUND_S + MARGIN_S
    assert answer[0] == 200
    assert served_again_after < BOUND_S
    assert not Plant.objects.filter(id__range=(11, 14)).exists()


@pytest.mark.parametrize("silent", ["database", "rate-limit store"])
def test_health_checks_piling_up_on_a_silent_dependency_answer_503_within_a_second_and_leave_creates_their_bound(
    production_unit, forwarded_database, redis_server, silent
):
    """A balancer checks /healthz each second and gives up on a check after one (HAProxy's `inter`);
    with the database (or Redis, the limits failing closed) silent, checks sent meanwhile take the one
    check's wait, or its "does not answer" within a second, instead of a worker thread each for the
    bound: creates still sent to the unit are answered 503 within their bound, not after a wait for a
    thread first."""
    url, database_port = forwarded_database
    server = production_unit(  # APP_PROCESSES=2, APP_THREADS=4: 8 threads
        DATABASE_URL=url,
        REDIS_URL=redis_server.url,
        PLANTS_THROTTLE_RATE="600/minute",
        PLANTS_RATE_LIMIT_FAILURE_MODE="closed",
    )
    port, bound_s, create_refused = {
        "database": (database_port, BOUND_S, DATABASE_DOWN),
        "rate-limit store": (redis_server.port, timeouts.REDIS_TIMEOUT_S, STORE_DOWN),
    }[silent]
    _, secret = token_issue(name="health-checks")
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    check = lambda: request(f"{server.url}/healthz", timeout=BOUND_S + MARGIN_S)  # noqa: E731
    assert [create(plant_id)[0] for plant_id in range(1, 9)] == [200] * 8  # workers hold connections

    with dropped_packets(port), ThreadPoolExecutor(max_workers=16) as clients:
        first = clients.submit(timed, check)
        time.sleep(1.2)
        checks = [clients.submit(timed, check) for _ in range(12)]
        time.sleep(timeouts.READINESS_PATIENCE_S + 0.3)  # the checks asked meanwhile have answered
        creates = [clients.submit(timed, create, plant_id) for plant_id in range(11, 14)]
        answered = [future.result() for future in [first, *checks]]
        created = [future.result() for future in creates]

    for elapsed, (status, headers, text) in created:
        assert (status, text, elapsed < bound_s + MARGIN_S) == (503, create_refused, True), elapsed
        assert headers["Content-Type"] == "application/json"
    not_answering = json.dumps({"error": 50300, "message": f"The {silent} does not answer."})
    assert [(status, text) for _, (status, _, text) in answered] == [(503, not_answering)] * 13
    # The first check waits out the bound; in the other process, one check of the twelve may.
    assert [elapsed < 1 + MARGIN_S for elapsed, _ in answered].count(False) <= 2
    assert not Plant.objects.filter(id__range=(11, 14)).exists()


def test_creates_queued_behind_every_thread_waiting_on_a_silent_database_are_answered_503_as_a_thread_frees(
    production_unit, forwarded_database
):
    """Every thread of the unit (2 processes × 4) waits on a silent database for the bound; 16 more
    creates wait for a thread meanwhile. Each of those, having waited past half the bound, is answered
    503 as soon as it gets a thread, not after a bound of its own: every create within 1.5 × the bound
    of being sent, nothing stored."""
    url, port = forwarded_database
    server = production_unit(DATABASE_URL=url)
    _, secret = token_issue(name="queued")

    def create(plant_id: int, **headers: str) -> tuple:
        return request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret, timeout=3 * BOUND_S, **headers)

    # The stamp is nginx's alone: one a client sends (here from 1970) is replaced, and it is served.
    assert [create(plant_id, X_Request_Start="t=0")[0] for plant_id in range(1, 9)] == [200] * 8

    with dropped_packets(port), ThreadPoolExecutor(max_workers=24) as clients:
        created = list(clients.map(lambda plant_id: timed(create, plant_id), range(11, 35)))

    answers = [(status, elapsed < 1.5 * BOUND_S + MARGIN_S) for elapsed, (status, _, _) in created]
    assert answers == [(503, True)] * 24, f"answered after {sorted(round(elapsed, 1) for elapsed, _ in created)} s"
    queued = [json.loads(text)["message"] for _, (_, _, text) in created if text != DATABASE_DOWN]
    assert len(queued) >= 16  # all but the 8 that had a thread at once
    assert all(TOO_BUSY.fullmatch(message) for message in queued), queued
    assert not Plant.objects.filter(id__range=(11, 34)).exists()


def connect_error(url: str) -> Exception | None:
    """The error of a connection to `url` made with the service's libpq parameters; None if it connects."""
    try:
        psycopg.connect(url, **timeouts.postgresql_options({}, "127.0.0.1", BOUND_S)).close()
    except psycopg.Error as error:
        return error
    return None


def test_redis_packets_dropped_answers_503_within_its_timeout_and_health_within_the_bound(
    production_unit, forwarded_database, redis_server
):
    url, database_port = forwarded_database
    server = production_unit(
        DATABASE_URL=url,
        REDIS_URL=redis_server.url,
        PLANTS_THROTTLE_RATE="600/minute",
        PLANTS_RATE_LIMIT_FAILURE_MODE="closed",
    )
    _, secret = token_issue(name="timeouts")
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    assert [create(plant_id)[0] for plant_id in range(1, 9)] == [200] * 8  # workers hold connections

    with dropped_packets(redis_server.port):
        created = [timed(create, plant_id) for plant_id in range(11, 14)]
        store_health = timed(request, f"{server.url}/healthz")
        liveness = request(f"{server.url}/livez")
        with dropped_packets(database_port):
            both_health = timed(request, f"{server.url}/healthz")
    healed = time.monotonic()
    while (answer := create(15))[0] != 200 and time.monotonic() < healed + BOUND_S:
        pass

    for elapsed, (status, headers, text) in created:
        assert (status, headers["Content-Type"], text) == (503, "application/json", STORE_DOWN)
        assert elapsed < timeouts.REDIS_TIMEOUT_S + MARGIN_S
    assert store_health[1][2] == '{"error": 50300, "message": "The rate-limit store does not answer."}'
    assert store_health[0] < BOUND_S + MARGIN_S
    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    assert both_health[1][0] == 503
    assert both_health[1][2] == '{"error": 50300, "message": "The database and the rate-limit store do not answer."}'
    assert both_health[0] < BOUND_S + MARGIN_S  # asked at once, not one after the other
    assert answer[0] == 200


def manage(database: str, *args: str) -> str:
    env = live_env(DATABASE_URL=database)
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout


@contextmanager
def sqlite_unit_beside_a_writer(tmp_path: Path):
    """A unit on a SQLite file of its own, a token issued there and not yet used, and a connection of
    another worker's to the file: (the unit, the token, that connection)."""
    path = tmp_path / "db.sqlite3"
    database = f"sqlite:///{path}"
    manage(database, "migrate", "--no-input")
    secret = manage(database, "token", "issue", "timeouts").strip()
    server = live_unit(tmp_path, DATABASE_URL=database).start()
    writer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    try:
        yield server, secret, writer
    finally:
        writer.close()
        server.stop()


@pytest.mark.live
@pytest.mark.own_database
def test_sqlite_writer_holding_the_lock_answers_503_within_the_bound_never_500(tmp_path):
    with sqlite_unit_beside_a_writer(tmp_path) as (server, secret, writer):
        writer.execute("BEGIN EXCLUSIVE")
        try:
            elapsed, (status, headers, text) = timed(request, f"{server.url}/plants", {"id": 1, "name": "Fern"}, secret)
        finally:
            writer.execute("ROLLBACK")
        after = request(f"{server.url}/plants", {"id": 2, "name": "Fern"}, secret)

    assert (status, headers["Content-Type"], text) == (503, "application/json", DATABASE_DOWN)
    assert BOUND_S - 0.5 < elapsed < BOUND_S + MARGIN_S  # it waited for the lock, and no longer
    assert after[0] == 200


@pytest.mark.live
@pytest.mark.own_database
def test_sqlite_writer_holding_the_lock_a_moment_delays_a_token_s_first_use_and_refuses_nothing(tmp_path):
    # The first use of a token writes its last_used_at: that write waits for SQLite's lock as any does
    # (a read then a write in one transaction would be refused at once, "database is locked").
    with sqlite_unit_beside_a_writer(tmp_path) as (server, secret, writer):
        writer.execute("BEGIN IMMEDIATE")  # another worker's write, committed a moment later
        with ThreadPoolExecutor(max_workers=1) as pool:
            pool.submit(lambda: (time.sleep(1), writer.execute("COMMIT")))
            status, _, text = request(f"{server.url}/plants", {"id": 1, "name": "Fern"}, secret)
        used = writer.execute("SELECT count(*) FROM plants_apitoken WHERE last_used_at IS NOT NULL").fetchone()

    assert (status, json.loads(text)) == (200, {"id": 1, "name": "Fern"})
    assert used == (1,)
