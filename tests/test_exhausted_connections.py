"""Exhausted connections: with every PostgreSQL connection slot, or every server connection of
PgBouncer's pool, held by other clients, a create is answered 503 within the bound
(PLANTS_DATABASE_TIMEOUT_S), /livez stays 200, and the unit serves again within seconds of the
connections freeing, without a restart. SQLite's write lock held by another writer is
tests/test_timeouts.py's."""

import configparser
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from deploy.processes import stop_process, wait_until
from localcluster.cluster import as_unprivileged_user
from localcluster.database import postgresql_bin
from localcluster.processes import free_port
from plants.models import Plant
from plants.services import token_issue
from tests.live import LIVE_SETTINGS, TOO_BUSY, create_many, live_unit, request
from tests.test_timeouts import BOUND_S, DATABASE_DOWN, MARGIN_S, manage, timed

DATABASE_SILENT = '{"error": 50300, "message": "The database does not answer."}'
# PostgreSQL's refusal of a role without SUPERUSER once only the reserved slots are left (its
# too_many_connections; "sorry, too many clients already" once none is). A refused connect carries
# no SQLSTATE in psycopg: its message says which.
SLOTS_RESERVED = "remaining connection slots are reserved for"


class SmallPostgres:
    """A PostgreSQL of the test's own on a loopback port with `max_connections` slots, `reserved` of
    them kept for superusers, cheap to exhaust; its data in a throwaway folder. Two roles without
    SUPERUSER, as production's are: `plantstore` (the app's, owning the database `plantstore`) and
    `other_app`. It runs as `postgres` when started as root (initdb and postgres refuse root)."""

    def __init__(self, max_connections: int, reserved: int, **settings):
        self.bin = postgresql_bin()
        self.port = free_port()
        self.max_connections, self.reserved = max_connections, reserved
        self.work_dir = Path(tempfile.mkdtemp(prefix="plantstore-exhausted."))
        self.work_dir.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.work_dir, "postgres", "postgres")
        self.data = self.work_dir / "data"
        # `settings` in place of these (postgresql.conf's names).
        self.settings = {
            "listen_addresses": "127.0.0.1",
            "port": self.port,
            "unix_socket_directories": self.work_dir,
            "max_connections": self.max_connections,
            "superuser_reserved_connections": self.reserved,
            "fsync": "off",  # thrown away after the test
            **settings,
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> "SmallPostgres":
        initdb = [str(self.bin / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--no-sync"]
        subprocess.run(initdb, check=True, capture_output=True, **as_unprivileged_user())
        self.launch()
        with self.connect("postgres", "postgres") as admin:
            for statement in (
                "CREATE ROLE plantstore LOGIN",
                "CREATE ROLE other_app LOGIN",
                "CREATE DATABASE plantstore OWNER plantstore",
            ):
                admin.execute(statement)
        return self

    def launch(self) -> None:
        """Start the server on its data (again, after it exited), its output appended to its log;
        wait until it answers."""
        command = [str(self.bin / "postgres"), "-D", str(self.data)]
        command += [argument for name, value in self.settings.items() for argument in ("-c", f"{name}={value}")]
        with (self.work_dir / "postgres.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=log, **as_unprivileged_user())
        wait_until(self.answers, self.process, 30, "postgres")

    def answers(self) -> bool:
        try:
            self.connect("postgres", "postgres").close()
        except psycopg.OperationalError:
            return False
        return True

    def url(self, user: str) -> str:
        return f"postgres://{user}@127.0.0.1:{self.port}/plantstore"

    def connect(self, user: str, database: str = "plantstore") -> psycopg.Connection:
        return psycopg.connect(
            host="127.0.0.1", port=self.port, user=user, dbname=database, connect_timeout=2, autocommit=True
        )

    def stop(self) -> None:
        stop_process(self.process, sig=signal.SIGINT)  # fast shutdown: its clients are disconnected
        shutil.rmtree(self.work_dir, ignore_errors=True)


@pytest.fixture
def small_postgres():
    # 12 slots, 3 (PostgreSQL's default) for superusers: 9 for the roles, above the unit's
    # APP_PROCESSES × APP_THREADS (2 × 4) connections; the test's own superuser session takes a reserved one.
    server = SmallPostgres(max_connections=12, reserved=3).start()
    yield server
    server.stop()


@contextmanager
def every_slot_taken(server: SmallPostgres, user: str):
    """Sessions of `user` opened until PostgreSQL refuses one, held while the block runs, closed
    after it whatever happens; yields (the sessions, the refusal)."""
    sessions: list[psycopg.Connection] = []
    refusal = None
    try:
        while refusal is None:
            try:
                sessions.append(server.connect(user))
            except psycopg.OperationalError as error:
                refusal = error
            if len(sessions) > server.max_connections:
                raise RuntimeError("PostgreSQL never refused a session")
        yield sessions, refusal
    finally:
        for session in sessions:
            session.close()


def stored_ids(server: SmallPostgres) -> set[int]:
    with server.connect("postgres") as admin:
        return {plant_id for (plant_id,) in admin.execute("SELECT id FROM plants_plant")}


@pytest.mark.live
@pytest.mark.own_database
def test_every_connection_slot_taken_answers_503_within_the_bound_and_serves_again_once_freed(tmp_path, small_postgres):
    app_url = small_postgres.url("plantstore")
    manage(app_url, "migrate", "--no-input")
    secret = manage(app_url, "token", "issue", "exhausted").strip()
    server = live_unit(tmp_path, DATABASE_URL=app_url).start()
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    try:
        assert [create(plant_id)[0] for plant_id in range(1, 9)] == [200] * 8  # workers hold connections
        # The unit's connections end (as DJANGO_CONN_MAX_AGE ends them), and another client takes
        # every slot: each request must connect anew, and is refused.
        with small_postgres.connect("postgres") as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = 'plantstore'")
            count = "SELECT count(*) FROM pg_stat_activity WHERE usename = 'plantstore'"
            wait_until(lambda: admin.execute(count).fetchone() == (0,), None, 10, "the unit's sessions ended")
        with every_slot_taken(small_postgres, "other_app") as (held, refusal), ThreadPoolExecutor(3) as clients:
            creates = [clients.submit(timed, create, plant_id) for plant_id in range(11, 14)]
            liveness = timed(request, f"{server.url}/livez")
            health = timed(request, f"{server.url}/healthz")
            created = [future.result() for future in creates]
            later = timed(create, 14)
        freed = time.monotonic()
        while (answer := create(15))[0] != 200 and time.monotonic() < freed + BOUND_S:
            time.sleep(0.05)
        served_again_after = time.monotonic() - freed
        afterwards = create_many(server.url, secret, range(21, 37), "Fern")
    finally:
        server.stop()

    assert len(held) == small_postgres.max_connections - small_postgres.reserved
    assert SLOTS_RESERVED in str(refusal)
    for elapsed, (status, headers, text) in [*created, later]:
        assert (status, headers["Content-Type"], text) == (503, "application/json", DATABASE_DOWN)
        assert elapsed < BOUND_S + MARGIN_S
    assert (liveness[1][0], liveness[1][2]) == (200, '{"status": "ok"}')
    assert liveness[0] < 1
    assert (health[1][0], health[1][2]) == (503, DATABASE_SILENT)
    assert health[0] < BOUND_S + MARGIN_S
    assert answer[0] == 200
    assert served_again_after < BOUND_S
    assert [status for status, _ in afterwards] == [200] * 16, afterwards  # every worker thread connects again
    assert stored_ids(small_postgres) == {*range(1, 9), 15, *range(21, 37)}


def pgbouncer_setting(config: Path, name: str) -> int:
    """A setting of the rendered localcluster/config/pgbouncer.ini, as production has it."""
    parser = configparser.ConfigParser(interpolation=None)
    parser.read(config)
    return int(parser["pgbouncer"][name])


@contextmanager
def transactions_holding(url: str, count: int):
    """`count` sessions through PgBouncer at `url`, each in an open transaction, so each holds a
    server connection of the pool (one per database and user: `url`'s user is the unit's, as other
    units' workers would be) until the block ends. Each runs a statement every second (below PgBouncer's
    idle_transaction_timeout and query_timeout, which would free them), as a busy client does."""
    sessions = [psycopg.connect(url, connect_timeout=2) for _ in range(count)]
    stopped = threading.Event()

    def keep_busy():
        while not stopped.wait(1):
            for session in sessions:
                session.execute("SELECT 1")

    keeper = threading.Thread(target=keep_busy)
    try:
        for session in sessions:
            session.execute("SELECT 1")  # psycopg sends BEGIN first: the transaction takes a server connection
        keeper.start()
        yield sessions
    finally:
        stopped.set()
        if keeper.is_alive():
            keeper.join()
        for session in sessions:
            session.close()


def test_pgbouncer_pool_held_answers_503_after_its_queue_wait_and_serves_again_once_freed(production_unit, pgbouncer):
    server = production_unit(**pgbouncer.client_settings)
    _, secret = token_issue(name="exhausted")
    create = lambda plant_id: request(f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret)  # noqa: E731
    pool_size = pgbouncer_setting(pgbouncer.config, "default_pool_size")
    # A client queued for a server connection is closed with an error by whichever ends first:
    # query_wait_timeout, or query_timeout, which counts from the query's arrival (PgBouncer 1.18
    # names query_timeout when both are 5 s).
    queue_wait_s = min(pgbouncer_setting(pgbouncer.config, name) for name in ("query_wait_timeout", "query_timeout"))
    assert [create(plant_id)[0] for plant_id in range(1, 9)] == [200] * 8  # workers hold connections

    app_threads = int(LIVE_SETTINGS["APP_PROCESSES"]) * int(LIVE_SETTINGS["APP_THREADS"])
    with transactions_holding(pgbouncer.url, pool_size), ThreadPoolExecutor(app_threads) as clients:
        # As many creates as the unit has app threads: every one of them waits in PgBouncer's queue.
        # A create may first wait for a thread of its worker (Granian's workers share the load
        # unevenly): under half the bound, then in PgBouncer's queue; past it, refused at once.
        slow_create = lambda plant_id: request(  # noqa: E731
            f"{server.url}/plants", {"id": plant_id, "name": "Fern"}, secret, timeout=2 * (BOUND_S + MARGIN_S)
        )
        creates = [clients.submit(timed, slow_create, plant_id) for plant_id in range(11, 11 + app_threads)]
        time.sleep(1)
        liveness = timed(request, f"{server.url}/livez")
        creates_were_waiting = not any(future.done() for future in creates)
        created = [future.result() for future in creates]
        later = timed(create, 30)  # PgBouncer closed the first ones' connections: a new wait, bounded too
        health = timed(request, f"{server.url}/healthz")
    freed = time.monotonic()
    while (answer := create(31))[0] != 200 and time.monotonic() < freed + BOUND_S:
        time.sleep(0.05)
    served_again_after = time.monotonic() - freed
    afterwards = create_many(server.url, secret, range(41, 57), "Fern")

    assert queue_wait_s <= BOUND_S
    assert (liveness[1][0], liveness[1][2]) == (200, '{"status": "ok"}')
    # nginx answers /livez itself: no app thread, all of them waiting, delays it.
    assert liveness[0] < 1 and creates_were_waiting
    for elapsed, (status, headers, text) in created:
        assert (status, headers["Content-Type"]) == (503, "application/json")
        assert text == DATABASE_DOWN or TOO_BUSY.fullmatch(json.loads(text)["message"]), text
        assert queue_wait_s - 0.5 < elapsed < 1.5 * BOUND_S + MARGIN_S
    elapsed, (status, headers, text) = later  # alone: it waited in PgBouncer's queue, and no longer
    assert (status, headers["Content-Type"], text) == (503, "application/json", DATABASE_DOWN)
    assert queue_wait_s - 0.5 < elapsed < BOUND_S + MARGIN_S
    assert (health[1][0], health[1][2]) == (503, DATABASE_SILENT)
    assert health[0] < BOUND_S + MARGIN_S
    assert answer[0] == 200
    assert served_again_after < BOUND_S
    assert [status for status, _ in afterwards] == [200] * 16, afterwards  # the closed connections were replaced
    assert set(Plant.objects.values_list("id", flat=True)) == {*range(1, 9), 31, *range(41, 57)}
