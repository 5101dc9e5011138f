"""make cluster's database tier under test: one pg_auto_failover formation and one cluster in front
of it per test module (tests/test_failover.py, tests/test_partitions.py), and what their tests share,
its pgBackRest backups' restore and schedule among it.

Each unit of the cluster reaches the database at an address of its own (localcluster/database.py:
ADDRESSES), as from a host of its own. Each test issues its own token, creates its own range of ids
(nothing is emptied between tests), and starts with the formation healthy. Stored rows are read from
the primary (or a standby) directly.
"""

import json
import os
import shutil
import subprocess

import psycopg
import pytest

from deploy.processes import ROOT, wait_until
from localcluster.cluster import as_unprivileged_user
from localcluster.database import ADDRESSES, PRIMARY_STATES, DataNode, FailoverDatabase
from localcluster.processes import free_port
from plants.timeouts import DEFAULT_DATABASE_TIMEOUT_S
from tests.live import LIVE_SETTINGS, PUBLIC_HOST, TOO_BUSY, Load, live_cluster, manage_on

# Measured here (docs/scaling.md, "Scaling out"): creates answer 200 again about 7 s after the primary's host
# is lost (monitor: 2 s to declare it down, 3 s for it to demote, then the promotion; HAProxy: 2
# health checks to put the app servers back). The bound tested:
FAILOVER_SECONDS = 15
UNAVAILABLE = [
    {"error": 50300, "message": "The service cannot reach its database; retry later."},
    {"error": 50300, "message": "No app server could answer; retry later."},
]


def service_unavailable(body: dict) -> bool:
    """A 503 Error body of the service's: its database away, no app server up, or the app server too busy."""
    return body in UNAVAILABLE or (body.get("error") == 50300 and bool(TOO_BUSY.fullmatch(body.get("message", ""))))


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
            pg_ctl, log = [str(formation.bin / "pg_ctl"), "-D", str(node.pgdata), "-w", "-s"], node.pgdata / "freed.log"
            try:
                formation.run([*pg_ctl, "start", "-l", str(log)])
            except RuntimeError as error:  # why PostgreSQL would not start is in its log, gone with the folder
                raise RuntimeError(
                    f"{error}\n{log.read_text(errors='replace')[-3000:] if log.exists() else ''}"
                ) from None
            formation.run([*pg_ctl, "stop", "-m", "immediate"])


@pytest.fixture(scope="module")
def cluster(database, tmp_path_factory):
    # Prometheus names the address it scrapes in its Host (tests/test_alerts_live.py): the operator
    # allows it beside the public name (docs/operating.md, Metrics).
    env = {
        **LIVE_SETTINGS,
        "PLANTS_THROTTLE_RATE": "100000/hour",
        "DJANGO_ALLOWED_HOSTS": f"{PUBLIC_HOST},127.0.0.1",
    }
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


def assert_only_created_or_unavailable(load: Load, context: str = "", fault_at: float | None = None) -> None:
    """Every answer came before the client's timeout, and is a 200 or a 503 Error body (`context`, what
    the test saw meanwhile, in the failure's message, and when each refusal was sent: from the fault's
    start, `fault_at`, else into the load)."""
    since, origin = (fault_at, "the fault's start") if fault_at is not None else (load.started, "the load's start")
    refused = [
        (status, content_type, text, f"sent {sent - since:+.1f} s from {origin}")
        for _, status, content_type, text, sent in load.answers
        if status != 200
    ]
    # A status of None: no answer (the client's timeout, or the connection closed or refused).
    assert all((status, content_type) == (503, "application/json") for status, content_type, *_ in refused), (
        refused,
        context,
    )
    assert all(service_unavailable(json.loads(text)) for _, _, text, _ in refused), (refused, context)


def restored_plant_ids(database: FailoverDatabase, target: str) -> set[int]:
    """The plants a point-in-time restore to `target` brings back, as on a new host (docs/operating.md):
    pgBackRest restores the newest backup before it into an empty data folder, and PostgreSQL, started
    there on a socket of its own, replays the archived WAL up to it (across the timelines since) and opens.
    The copy archives nothing (--archive-mode=off): it must not write a timeline of its own into the
    repository the formation archives into."""
    node = database.nodes[0]  # any node's configuration: every node names the same repository
    folder = database.work_dir / "restored"
    folder.mkdir(mode=0o700)
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres", "postgres")
    pg_ctl = [str(database.bin / "pg_ctl"), "-D", str(folder), "-w", "-s"]
    # Its restore_command is pgBackRest's, which finds the node's configuration in its environment.
    run = {"env": node.env, "capture_output": True, "text": True, "timeout": 120, **as_unprivileged_user()}
    try:
        database.pgbackrest(
            node, f"--pg1-path={folder}", "--type=time", f"--target={target}", "--target-action=promote",
            "--archive-mode=off", "restore",
        )  # fmt: skip
        port = free_port()
        options = f"-p {port} -c listen_addresses='' -c unix_socket_directories='{database.work_dir}'"
        # -l: the server's output in a file (PostgreSQL's logging collector takes it over), not in pg_ctl's pipe.
        started = subprocess.run([*pg_ctl, "-o", options, "-l", str(folder / "start.log"), "start"], **run)
        try:
            if started.returncode:
                raise RuntimeError(f"the restored copy did not start: {started.stdout}{started.stderr}")
            return plant_ids_once_recovered(database, port)
        except (RuntimeError, psycopg.Error) as error:
            logs = "".join(path.read_text(errors="replace") for path in sorted(folder.glob("**/*.log")))
            raise RuntimeError(f"{error}\n{logs[-4000:]}") from None
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], **run)
        shutil.rmtree(folder, ignore_errors=True)


def plant_ids_once_recovered(database: FailoverDatabase, port: int) -> set[int]:
    """The plants of the restored copy listening on `port`, once its recovery has ended (it takes writes)."""
    address = {"host": str(database.work_dir), "port": port, "user": "postgres", "dbname": database.database}

    def query(sql: str) -> list[tuple]:
        with psycopg.connect(**address, autocommit=True) as conn:
            return conn.execute(sql).fetchall()

    wait_until(lambda: not query("SELECT pg_is_in_recovery()")[0][0], None, 60, "the restored copy's recovery")
    return {plant_id for (plant_id,) in query("SELECT id FROM plants_plant")}


def scheduled_backup(database: FailoverDatabase, node: DataNode, kind: str) -> subprocess.CompletedProcess:
    """docs/operating.md's cron line for the pair that takes a `kind` (full, diff) backup, its command
    run on `node`'s host as cron runs it: by `sh`, as postgres, psql's port that of the node."""
    lines = (ROOT / "docs" / "operating.md").read_text().splitlines()
    (line,) = [line for line in lines if "pg_is_in_recovery" in line and f"--type={kind} backup" in line]
    *_schedule_and_user, command = line.split(maxsplit=6)
    env = {**node.env, "PGHOST": str(database.socket_dir), "PGPORT": str(node.port)}
    return subprocess.run(
        ["sh", "-c", command], env=env, cwd=database.work_dir, capture_output=True, text=True, timeout=300,
        **as_unprivileged_user(),
    )  # fmt: skip
