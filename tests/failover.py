"""make cluster's database tier under test: one pg_auto_failover formation and one cluster in front
of it per test module (tests/test_failover.py, tests/test_partitions.py), and what their tests share.

Each unit of the cluster reaches the database at an address of its own (localcluster/database.py:
ADDRESSES), as from a host of its own. Each test issues its own token, creates its own range of ids
(nothing is emptied between tests), and starts with the formation healthy. Stored rows are read from
the primary (or a standby) directly.
"""

import json

import psycopg
import pytest

from deploy.processes import wait_until
from localcluster.database import ADDRESSES, PRIMARY_STATES, DataNode, FailoverDatabase
from plants.timeouts import DEFAULT_DATABASE_TIMEOUT_S
from tests.live import LIVE_SETTINGS, Load, live_cluster, manage_on

# Measured here (docs/scaling.md, "Scaling out"): creates answer 200 again about 7 s after the primary's host
# is lost (monitor: 2 s to declare it down, 3 s for it to demote, then the promotion; HAProxy: 2
# health checks to put the app servers back). The bound tested:
FAILOVER_SECONDS = 15
UNAVAILABLE = [
    {"error": 50300, "message": "The service cannot reach its database; retry later."},
    {"error": 50300, "message": "No app server could answer; retry later."},
]
# Every create is answered within the database bound (plants/timeouts.py), whatever the formation's state.
BOUND_SECONDS = DEFAULT_DATABASE_TIMEOUT_S


@pytest.fixture(scope="module")
def database():
    formation = FailoverDatabase().start()
    yield formation
    try:
        free_shared_memory_of_lost_hosts(formation)
    finally:
        formation.stop()


def free_shared_memory_of_lost_hosts(formation: FailoverDatabase) -> None:
    """A PostgreSQL killed with its host (DataNode.kill) leaves its shared memory behind (segments in
    /dev/shm, a System V one) until a server starts on its data folder again: start and stop each
    node a test left lost, so that PostgreSQL itself frees them before the folder goes."""
    for node in formation.nodes:
        if node.process.poll() is not None and (node.pgdata / "postmaster.pid").exists():
            node.wait_until_gone()
            pg_ctl = [str(formation.bin / "pg_ctl"), "-D", str(node.pgdata), "-w", "-s"]
            formation.run([*pg_ctl, "start", "-l", str(node.pgdata / "freed.log")])
            formation.run([*pg_ctl, "stop", "-m", "immediate"])


@pytest.fixture(scope="module")
def cluster(database, tmp_path_factory):
    env = {**LIVE_SETTINGS, "PLANTS_THROTTLE_RATE": "100000/hour"}
    manage_on(database.url, "migrate", "--no-input", "-v", "0")
    # Each unit reaches the database at an address of its own, as from a host of its own.
    urls = [database.url_via(address) for address in ADDRESSES]
    live = live_cluster(None, tmp_path_factory.mktemp("failover"), database_url=urls, **env).start()
    yield live
    live.stop()


@pytest.fixture
def healthy(database):
    """The formation as each test expects it: every node running, one primary, one standby."""
    for node in database.nodes:
        if node.process.poll() is not None:
            node.start()
    database.wait_until_healthy(timeout=60)
    return database


def issue_token(database: FailoverDatabase, name: str) -> str:
    return manage_on(database.url, "token", "issue", name)


def stored_ids(node: DataNode) -> set[int]:
    return {plant_id for (plant_id,) in FailoverDatabase.execute(node, "SELECT id FROM plants_plant")}


def wait_for_promotion(database: FailoverDatabase, lost: DataNode) -> DataNode:
    """The standby the monitor promoted in place of `lost`, once it takes writes."""

    def promoted() -> bool:
        try:
            states = database.states()
            return any(states[node.name][0] in PRIMARY_STATES for node in database.nodes if node is not lost)
        except (psycopg.Error, KeyError):
            return False

    wait_until(promoted, None, 60, "the standby's promotion")
    return database.primary()


def assert_only_created_or_unavailable(load: Load) -> None:
    """Every answer came before the client's timeout, and is a 200 or a 503 Error body."""
    for _, status, content_type, text, _sent in load.answers:
        if status != 200:
            assert (status, content_type, json.loads(text) in UNAVAILABLE) == (503, "application/json", True), text
