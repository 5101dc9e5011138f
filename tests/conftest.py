"""Shared fixtures (an API client, an issued token, live servers) and the suite's rules on skips.

A skipped test did not pass: the run fails if any test skips. Tests that need PostgreSQL (marked
`postgres`, or using a live server on the test database) are deselected on SQLite (counted in the
summary) and run in `make test-postgres`; so are those that need the machine to themselves (`alone`).
Tests whose servers use a database of their own (`own_database`: `make serve`'s SQLite file, a
PostgreSQL server of the test's own) and the containers run once, as the run's database cannot change
their outcome: in the SQLite pass, but for the modules of `RUN_ONCE_IN_POSTGRESQL_PASS` (`--with-own-database`
runs the own_database tests on PostgreSQL, and no container, for make test-newest's single pass).
Tests of SQLite's own behaviour on the run's SQLite test database (`sqlite`) run in the SQLite pass only.
"""

import json
import secrets

import pytest
from django.db import connection
from rest_framework.test import APIClient

from deploy.processes import wait_until
from localcluster.cluster import PgBouncer, Redis
from localcluster.processes import LocalUnit
from plants import timeouts
from plants.rate_stores import RATE_LIMIT_CACHE
from plants.services import token_issue
from tests.archived_postgres import ArchivedPostgres
from tests.clock import NOW, Clock
from tests.installed_unit import CLIENT, ENV_FILE, FAILOVER_URL, PROMETHEUS_NAMES_IT, RATE, TLS_PROXY_ADDRESS, Deployed
from tests.live import MakeServe, database_url, live_unit
from tests.operator_docs import OperatorDocs
from tests.systemd_host import booted_host


@pytest.fixture
def api_client() -> APIClient:
    return APIClient()


@pytest.fixture
def issued_token(db) -> tuple:
    """A (ApiToken, secret) pair."""
    return token_issue(name="test-client")


@pytest.fixture
def token(issued_token) -> str:
    return issued_token[1]


@pytest.fixture
def auth_headers(token) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {token}"}


@pytest.fixture
def post_plant(api_client, auth_headers):
    """POST a JSON body (a dict, or raw bytes/str sent as is) to /plants with a valid token."""

    def post(body, content_type="application/json", **headers):
        if not isinstance(body, (str, bytes)):
            body = json.dumps(body)
        return api_client.generic("POST", "/plants", body, content_type=content_type, **{**auth_headers, **headers})

    return post


@pytest.fixture
def writes_refused():
    """A function that makes this connection refuse writes, as a server in the failover window does:
    SQLite's driver then raises OperationalError, PostgreSQL's InternalError (SQLSTATE 25006)."""

    def refuse():
        with connection.cursor() as cursor:
            cursor.execute(
                {"sqlite": "PRAGMA query_only = ON", "postgresql": "SET TRANSACTION READ ONLY"}[connection.vendor]
            )

    yield refuse
    if connection.vendor == "sqlite":  # a pragma outlives the test's transaction
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA query_only = OFF")


# Live servers share the test database, which only PostgreSQL's tests can (SQLite's is in memory).
NEEDS_POSTGRESQL = {"production_unit", "pgbouncer"}
# Fixtures that start a server process: a test that uses one is `live`, and not in `make check`.
STARTS_A_SERVER = {"production_unit", "pgbouncer", "redis_server", "counting_in_redis", "browser_page", "systemd_host"}
skipped: list[str] = []


# The modules that take longest (their servers, loads and timeouts), longest first, as measured in
# make test (2026-12-02, seconds of a pass): make test's processes take modules in collection order,
# so these start first and none is left to run alone at the end of a pass.
SLOWEST_MODULES = [
    "test_systemd_host.py",  # 510, SQLite pass
    "test_release_states.py",  # 380, SQLite pass
    "test_alerts_live.py",  # 360, PostgreSQL pass
    "test_failover.py",  # 340, PostgreSQL pass
    "test_systemd_host_alerts.py",  # 250 (its host, then the page), PostgreSQL pass
    "test_container.py",  # 165
    "test_cluster.py",  # 110
    "test_edge.py",  # 100 in each pass
    "test_reload.py",  # 100
    "test_serve.py",  # 70
    "test_browser.py",  # 60
    "test_stop.py",  # 60
    "test_backups.py",  # 55
    "test_integrity.py",  # 50
    "test_timeouts.py",  # 40
    "test_revocation.py",  # 35
    "test_traces_exported.py",
]


# The modules of run-once tests (`own_database`, `container`) that the PostgreSQL pass runs, not the
# SQLite pass: modules that mostly wait, run where the processes beside test_alerts_live.py would sit
# idle (docs/decisions/parallel-tests.md, measured 2026-12-03).
RUN_ONCE_IN_POSTGRESQL_PASS = {"test_systemd_host_alerts.py"}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with a process given its next module once it has one test left, not two:
    a module whose last two tests take minutes (the release stopped by TERM, then by KILL) would
    otherwise hold the next module behind them while other processes sit idle."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class NextModuleAtTheLastTest(LoadFileScheduling):
        def _reschedule(self, node):
            if not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) > 1:
                return
            super()._reschedule(node)

    return NextModuleAtTheLastTest(config, log)


def pytest_addoption(parser):
    parser.addoption(
        "--with-own-database",
        action="store_true",
        help="on PostgreSQL, run the own_database tests too: for a run that is the only one on its Python "
        "and Django, as make test-newest's",
    )


def pytest_collection_modifyitems(config, items):
    slowest_first = {name: rank for rank, name in enumerate(SLOWEST_MODULES)}
    items.sort(key=lambda item: slowest_first.get(item.path.name, len(SLOWEST_MODULES)))  # stable
    for item in items:
        if NEEDS_POSTGRESQL & set(item.fixturenames):
            item.add_marker(pytest.mark.postgres)
        if STARTS_A_SERVER & set(item.fixturenames):
            item.add_marker(pytest.mark.live)
    postgresql, with_own_database = connection.vendor == "postgresql", config.getoption("with_own_database")
    deselected = [item for item in items if not in_this_pass(item, postgresql, with_own_database)]
    config.hook.pytest_deselected(items=deselected)
    items[:] = [item for item in items if item not in deselected]


def in_this_pass(item, postgresql: bool, with_own_database: bool) -> bool:
    """Whether the pass on PostgreSQL (else SQLite) runs the test: the rules of this module's docstring."""
    if item.get_closest_marker("sqlite"):
        return not postgresql
    if item.get_closest_marker("postgres") or item.get_closest_marker("alone"):
        return postgresql  # the alone ones after the others (make test-postgres), whatever their database
    container = bool(item.get_closest_marker("container"))
    if postgresql and with_own_database:  # make test-newest's one pass: Python's and Django's tests, no container
        return not container
    if container or item.get_closest_marker("own_database"):  # their servers use no test database: once
        return postgresql == (item.path.name in RUN_ONCE_IN_POSTGRESQL_PASS)
    return True


def pytest_runtest_logreport(report):
    if report.skipped:
        skipped.append(report.nodeid)


def pytest_sessionfinish(session, exitstatus):
    if skipped and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    if skipped:
        terminalreporter.write_line(f"FAILED: {len(skipped)} test(s) skipped; a skipped test did not pass:", red=True)
        for nodeid in skipped:
            terminalreporter.write_line(f"  {nodeid}")


@pytest.fixture
def production_unit(transactional_db, tmp_path):
    """Start production units (nginx, then the app server: deploy/unit.py) on the test database:
    `server = production_unit(**environment)`."""
    servers = []

    def start(**env) -> LocalUnit:
        server = live_unit(tmp_path, **{"DATABASE_URL": database_url(connection.settings_dict), **env})
        servers.append(server)
        return server.start()

    yield start
    for server in servers:
        server.stop()
    # Its workers' sessions end just after they exit: wait, or dropping the test database may find one.
    with connection.cursor() as cursor:
        wait_until(lambda: not other_sessions(cursor), None, 10, "the stopped units' database sessions")


def other_sessions(cursor) -> int:
    cursor.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    return cursor.fetchone()[0]


@pytest.fixture
def served(tmp_path):
    """`make serve` started as an operator starts it (tests/live.py: MakeServe), stopped after the test."""
    server = MakeServe(tmp_path).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def systemd_host():
    """A Debian host with systemd as PID 1 (tests/systemd_host.py), booted for the module, removed
    after it whatever happens."""
    yield from booted_host()


@pytest.fixture(scope="module")
def docs(systemd_host) -> OperatorDocs:
    """The operator's pages' shell blocks, run on the module's host (tests/operator_docs.py)."""
    return OperatorDocs(systemd_host).install()


@pytest.fixture(scope="module")
def deployed(systemd_host, docs) -> Deployed:
    """The host's operator's path, as written: docs/deploying.md's install block; then what the page
    leaves to the operator's editor and database host: the environment file edited (a secret key, the
    metrics token, the database as the failover pair's URL, the TLS proxies, the name Prometheus scrapes
    it by among the allowed hosts), a role and a database made
    on the host's PostgreSQL, a TLS proxy in front on the host; then the first release's block."""
    service = Deployed(systemd_host)
    docs.run("deploying.md", "apt-get install --no-install-recommends nginx python3-venv")
    password = secrets.token_hex(16)
    systemd_host.run(
        "cd / && runuser -u postgres -- createuser plantstore && runuser -u postgres -- createdb --owner plantstore plantstore"
        f" && runuser -u postgres -- psql -q -c \"ALTER ROLE plantstore PASSWORD '{password}'\""
    )
    # The TLS proxies in front: this machine, whose connections podman's published port brings from
    # the host's gateway address, and the host's own, for the docs' requests to the public name.
    gateway = systemd_host.run("ip -4 route show default").stdout.split()[2]
    hosts = next(
        line
        for line in systemd_host.run(f"cat {ENV_FILE}").stdout.splitlines()
        if line.startswith("DJANGO_ALLOWED_HOSTS=")
    )
    service.configure(
        DJANGO_ALLOWED_HOSTS=f"{hosts.partition('=')[2]},{PROMETHEUS_NAMES_IT}",
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        PLANTS_METRICS_TOKEN=secrets.token_urlsafe(32),
        DATABASE_URL=FAILOVER_URL.format(password=password),
        PLANTS_TRUSTED_PROXIES=f"{gateway},{TLS_PROXY_ADDRESS}",
        PLANTS_THROTTLE_RATE=f"{RATE}/day",
    )
    service.start_tls_proxy()
    docs.run("deploying.md", "release=/opt/plantstore-releases/$(date")  # the first release: slot a, then nginx
    service.token = service.issue(CLIENT)
    return service


@pytest.fixture
def clock(monkeypatch) -> Clock:
    """The rate limits' clock, at NOW (tests/clock.py) until the test moves it."""
    clock = Clock(NOW)
    monkeypatch.setattr("plants.throttling.clock", clock)
    return clock


@pytest.fixture
def archived_postgres():
    """A PostgreSQL server of the test's own, archived and backed up as docs/operating.md sets one up."""
    database = ArchivedPostgres()
    try:
        yield database.create()
    finally:
        database.remove()


@pytest.fixture
def redis_server():
    server = Redis().start()
    yield server
    server.stop()


@pytest.fixture
def counting_in_redis(settings, redis_server):
    """The settings REDIS_URL makes (plantstore_site/settings.py): the rate-limit counters in this
    real redis-server, through Django's cache framework. Yields the server."""
    settings.REDIS_URL = redis_server.url
    settings.CACHES = {
        **settings.CACHES,
        RATE_LIMIT_CACHE: {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_server.url,
            "KEY_PREFIX": "plants:rate",
            "OPTIONS": timeouts.redis_options(),
        },
    }
    return redis_server


@pytest.fixture
def pgbouncer(transactional_db):
    """A PgBouncer pooling by transaction in front of the test database (PostgreSQL only)."""
    server = PgBouncer(connection.settings_dict).start()
    yield server
    server.stop()
