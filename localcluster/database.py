"""`make cluster`'s database tier: a PostgreSQL primary and a synchronous standby, failed over by pg_auto_failover.

pg_auto_failover's monitor (a PostgreSQL of its own) health-checks each data node; each data node is
`pg_autoctl run` (the keeper) with its PostgreSQL as a child, its own process group, as if on its own
host. The app servers reach the primary by one libpq connection string naming every node with
`target_session_attrs=read-write`: libpq tries the nodes in turn and keeps the one that takes writes.
Both data nodes archive their WAL with pgBackRest as docs/operating.md sets a pair up (deploy/pgbackrest.conf,
deploy/postgresql-archiving.conf), into one repository folder standing in for the shared repository:
whichever node is the primary archives. deploy/standby_guard.py runs beside the monitor, as on its host:
a standby whose replication stalls while it answers the monitor is put in maintenance, so the primary
stops waiting for it.
Servers run as `postgres` when started as root (initdb and pg_autoctl refuse root), on loopback ports.
"""

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from deploy.processes import ROOT, render, stop_process, wait_until
from localcluster.cluster import CONFIG, as_unprivileged_user
from localcluster.processes import ServerProcess, descendants, free_port

PRIMARY_STATES = {"single", "wait_primary", "primary"}
# Every data node answers on both: the app servers may each reach the database by an address of their
# own, as if from their own host, so that a fault can cut one of them off and not the others.
ADDRESSES = ("127.0.0.1", "127.0.0.2")
# pgBackRest's name for the database cluster in its repository (deploy/postgresql-archiving.conf's).
STANZA = "plantstore"


def postgresql_bin() -> Path:
    """The newest installed PostgreSQL server's programs (Debian: /usr/lib/postgresql/NN/bin)."""
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), key=lambda path: int(path.parent.parent.name))
    if not found:
        raise RuntimeError("no PostgreSQL server is installed (Debian package postgresql)")
    return found[-1].parent


def pg_autoctl() -> str:
    binary = shutil.which("pg_autoctl")
    if binary is None:
        major = postgresql_bin().parent.name
        raise RuntimeError(
            f"pg_autoctl is not installed (Debian packages pg-auto-failover-cli postgresql-{major}-auto-failover)"
        )
    return binary


class DataNode:
    """One node (a data node, or the monitor): `pg_autoctl run` and its PostgreSQL, in one process group.

    A data node's keeper reaches the monitor at `monitor_address`, its own, as from a host of its own:
    a fault can cut one node's keeper off from the monitor and not the other's."""

    def __init__(self, formation: "FailoverDatabase", name: str, monitor_address: str = "127.0.0.1"):
        self.formation = formation
        self.name = name
        self.monitor_address = monitor_address
        self.port = free_port()
        self.pgdata = formation.work_dir / self.name
        self.log_path = formation.work_dir / f"{self.name}.log"
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{formation.database}"
        # Its host's /etc/pgbackrest/pgbackrest.conf (written by FailoverDatabase for a data node), which
        # the archive_command's pgbackrest finds through pgBackRest's environment variable.
        self.pgbackrest_config = formation.work_dir / f"{self.name}-pgbackrest" / "pgbackrest.conf"
        self.env = {**formation.env, "PGBACKREST_CONFIG": str(self.pgbackrest_config)}
        self.process: subprocess.Popen | None = None
        self.lost: list[int] = []  # the processes kill() ended, until they are gone

    def create(self) -> None:
        """Register with the monitor and keep running: the first node becomes the primary, the
        others take a base backup of it and follow."""
        self.launch(
            "create", "postgres", "--pgctl", str(self.formation.bin / "pg_ctl"), "--pgdata", str(self.pgdata),
            "--pgport", str(self.port), "--listen", ",".join(ADDRESSES), "--hostname", "127.0.0.1", "--name", self.name,
            "--auth", "trust", "--no-ssl", "--dbname", self.formation.database,
            "--monitor", self.formation.monitor_url_via(self.monitor_address), "--run",
        )  # fmt: skip

    def start(self) -> None:
        """Start again after stop() or kill(): the node rejoins, as a standby if another was promoted."""
        self.wait_until_gone()
        self.launch("run", "--pgdata", str(self.pgdata))

    def launch(self, *arguments: str) -> None:
        with self.log_path.open("ab") as log:
            command = [pg_autoctl(), *arguments]
            self.process = subprocess.Popen(
                ["setpriv", "--pdeathsig", "TERM", *command] if self.formation.supervised else command,
                cwd=self.formation.work_dir,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                process_group=0,
                **as_unprivileged_user(),
            )

    def kill(self) -> None:
        """The host is lost: SIGKILL the keeper and all of its PostgreSQL at once (killing PostgreSQL
        alone, the keeper would restart it on the same node instead of failing over). PostgreSQL makes
        each of its children (backends, walsender, checkpointer...) a process group of its own, so the
        keeper's group is not all: it is stopped first (its postmaster forks no more), then every
        process it started is killed with it."""
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGSTOP)
            self.lost = descendants(self.process.pid)
            os.killpg(self.process.pid, signal.SIGKILL)
            for pid in self.lost:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self.process.wait()

    def wait_until_gone(self, timeout: float = 30) -> None:
        """Wait until no process kill() ended is left, not even unreaped: PostgreSQL refuses to start on
        a data folder whose postmaster.pid names a process that still exists ("lock file already
        exists"), and a killed postmaster, orphaned, is reaped only when the system's init gets to it
        (about 2 s here). A child left running would also hold its shared memory ("still in use")."""
        gone = f"the end of {self.name}'s killed processes"
        wait_until(lambda: not any(Path(f"/proc/{pid}").exists() for pid in self.lost), None, timeout, gone)
        self.lost = []

    def stop(self) -> None:
        stop_process(self.process, timeout=30)  # the keeper stops its PostgreSQL (fast shutdown)
        if self.process:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)  # anything it left in its group
            except ProcessLookupError:
                pass

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


class FailoverDatabase:
    """pg_auto_failover's monitor and `nodes` data nodes (a primary and synchronous standbys) on
    loopback ports, their data in a throwaway folder. `url` follows the primary:
    postgres://postgres@/plantstore?host=127.0.0.1,127.0.0.1&port=5433,5434&target_session_attrs=read-write"""

    def __init__(self, nodes: int = 2, database: str = "plantstore", supervised: bool = False):
        self.bin = postgresql_bin()
        self.database = database
        self.supervised = supervised
        # PG_DURABLE=1 (make bench-cluster): every commit flushed to disk on each node, as production
        # runs it; else fsync off (localcluster/config/failover-node.conf says why).
        self.durable = os.environ.get("PG_DURABLE", "0") == "1"
        self.work_dir = Path(tempfile.mkdtemp(prefix="plantstore-failover."))
        self.work_dir.chmod(0o755)
        if os.geteuid() == 0:
            shutil.chown(self.work_dir, "postgres", "postgres")
        # pg_autoctl keeps its configuration and state under the XDG folders: this formation's own.
        self.env = {
            **os.environ,
            "XDG_CONFIG_HOME": str(self.work_dir / "config"),
            "XDG_DATA_HOME": str(self.work_dir / "share"),
            "XDG_RUNTIME_DIR": str(self.work_dir / "run"),
            "PG_CONFIG": str(self.bin / "pg_config"),
            "PATH": f"{self.bin}:{os.environ.get('PATH', '')}",
        }
        self.monitor = DataNode(self, "monitor")
        self.monitor_error: psycopg.Error | None = None
        self.monitor_url = self.monitor_url_via("127.0.0.1")
        self.nodes = [DataNode(self, f"node{n}", monitor_address=f"127.0.0.{2 + n}") for n in range(1, nodes + 1)]
        self.url = self.url_via(ADDRESSES[0])
        # The repository both nodes archive into and back up to: on real hosts an object store or a
        # folder mounted from the backup host, here one folder.
        self.repository = self.work_dir / "pgbackrest-repository"
        self.socket_dir = Path("/var/run/postgresql")  # where pg_autoctl has PostgreSQL's socket: Debian's default
        guard = [sys.executable, "-m", "deploy.standby_guard", *self.switchover_arguments()]
        self.guard = ServerProcess("standby_guard", guard, os.environ, self.work_dir / "standby_guard.log", supervised)

    def configure_pgbackrest(self, node: DataNode, cipher_pass: str) -> None:
        """deploy/pgbackrest.conf as on `node`'s host: the same repository and passphrase on every node,
        pg1 the node's own PostgreSQL, logs and locks its own."""
        folder = node.pgbackrest_config.parent
        for path in (folder, folder / "log", folder / "lock", self.repository):
            path.mkdir(exist_ok=True)
        render(
            ROOT / "deploy" / "pgbackrest.conf",
            node.pgbackrest_config,
            REPOSITORY=str(self.repository),
            CIPHER_PASS=cipher_pass,
            LOG_PATH=str(folder / "log"),
            LOCK_PATH=str(folder / "lock"),
            PGDATA=str(node.pgdata),
            PG_SOCKET=str(self.socket_dir),
            PG_PORT=str(node.port),
        ).chmod(0o600)  # it holds the repository's passphrase
        if os.geteuid() == 0:
            for path in [folder, *folder.iterdir(), self.repository]:
                shutil.chown(path, "postgres", "postgres")

    def monitor_url_via(self, address: str) -> str:
        return f"postgres://autoctl_node@{address}:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def url_via(self, address: str) -> str:
        """The URL that follows the primary, reaching every node at `address` (one of ADDRESSES).

        libpq's URI form with the hosts as parameters, which dj_database_url also reads (its OPTIONS
        reach libpq as they are). connect_timeout: a lost host is skipped after 2 s."""
        hosts = ",".join(address for _ in self.nodes)
        ports = ",".join(str(node.port) for node in self.nodes)
        return (
            f"postgres://postgres@/{self.database}?host={hosts}&port={ports}"
            "&target_session_attrs=read-write&connect_timeout=2"
        )

    def start(self) -> "FailoverDatabase":
        try:
            cipher_pass = secrets.token_urlsafe(48)
            for node in self.nodes:
                self.configure_pgbackrest(node, cipher_pass)
            self.start_monitor()
            self.initdb(self.nodes[0])
            self.nodes[0].create()
            wait_until(lambda: self.states().get("node1") == ("single", "single"), None, 60, "the first node")
            self.pgbackrest(self.nodes[0], "stanza-create")
            # A standby's base backup starts with a checkpoint: have it find little to write.
            self.execute(self.nodes[0], "CHECKPOINT")
            for node in self.nodes[1:]:
                node.create()
            self.wait_until_healthy(timeout=120)
            self.guard.launch()
        except BaseException as error:
            logs = "\n".join(f"--- {node.name}\n{node.log()[-3000:]}" for node in [self.monitor, *self.nodes])
            self.stop()
            if isinstance(error, RuntimeError):
                why = f" (the monitor's last refusal: {self.monitor_error})" if self.monitor_error else ""
                raise RuntimeError(f"{error}{why}\n{logs}") from None
            raise
        return self

    def start_monitor(self) -> None:
        command = [pg_autoctl(), "create", "monitor", "--pgctl", str(self.bin / "pg_ctl")]
        command += ["--pgdata", str(self.monitor.pgdata), "--pgport", str(self.monitor.port)]
        command += ["--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl"]
        self.run(command)
        # After pg_autoctl's own include, so that its timers and its listen addresses win.
        addresses = ",".join(["127.0.0.1", *(node.monitor_address for node in self.nodes)])
        with (self.monitor.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n" + (CONFIG / "failover-monitor.conf").read_text())
            conf.write(
                f"# The test's and each data node's keeper's (DataNode.monitor_address).\nlisten_addresses = '{addresses}'\n"
            )
        self.monitor.start()
        wait_until(self.monitor_answers, self.monitor.process, 30, "the pg_auto_failover monitor")

    def initdb(self, node: DataNode) -> None:
        """The first node's data folder, with localcluster/config/failover-node.conf and
        deploy/postgresql-archiving.conf (the standbys copy them)."""
        self.run([str(self.bin / "initdb"), "-D", str(node.pgdata), "-U", "postgres", "--auth=trust", "-E", "UTF8"])
        node_conf = render(
            CONFIG / "failover-node.conf",
            self.work_dir / "failover-node.conf",
            MAX_CONNECTIONS="200",
            FSYNC="on" if self.durable else "off",
        )
        with (node.pgdata / "postgresql.conf").open("a") as conf:
            conf.write("\n" + node_conf.read_text())
            conf.write("\n" + (ROOT / "deploy" / "postgresql-archiving.conf").read_text())

    def pgbackrest(self, node: DataNode, *arguments: str) -> str:
        """pgBackRest run on `node`'s host (its configuration) for the stanza; its output."""
        binary = shutil.which("pgbackrest")
        if binary is None:
            raise RuntimeError("pgbackrest is not installed (Debian package pgbackrest)")
        command = [binary, f"--stanza={STANZA}", *arguments]
        done = subprocess.run(
            command, env=node.env, cwd=self.work_dir, capture_output=True, text=True, timeout=300,
            **as_unprivileged_user(),
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"pgbackrest {' '.join(arguments)} on {node.name} failed: {done.stdout}{done.stderr}")
        return done.stdout

    def run(self, command: list[str]) -> None:
        done = subprocess.run(command, env=self.env, cwd=self.work_dir, capture_output=True, **as_unprivileged_user())
        if done.returncode:
            raise RuntimeError(f"{command[:3]} failed: {done.stdout.decode()}{done.stderr.decode()}")

    def monitor_answers(self) -> bool:
        try:
            self.states()
            return True
        except psycopg.Error as error:
            self.monitor_error = error  # the reason start() gives if it never answers
            return False

    def states(self) -> dict[str, tuple[str, str]]:
        """Each data node's (reported, assigned) state, as the monitor holds them."""
        query = "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node"
        with psycopg.connect(self.monitor_url, connect_timeout=2, autocommit=True) as conn:
            return {name: (reported, goal) for name, reported, goal in conn.execute(query)}

    def healthy(self) -> bool:
        """One primary with a synchronous standby (the monitor's `primary`), every other a `secondary`."""
        try:
            states = self.states()
        except psycopg.Error:
            return False
        wanted = sorted(["primary"] + ["secondary"] * (len(self.nodes) - 1))
        settled = all(reported == goal for reported, goal in states.values())
        return len(states) == len(self.nodes) and settled and sorted(goal for _, goal in states.values()) == wanted

    def wait_until_healthy(self, timeout: float = 60) -> None:
        wait_until(self.healthy, None, timeout, "the database's primary and standby")

    def primary(self) -> DataNode:
        """The node the monitor has made primary (or is making primary)."""
        states = self.states()
        return next(node for node in self.nodes if states.get(node.name, ("", ""))[1] in PRIMARY_STATES)

    def standbys(self) -> list[DataNode]:
        primary = self.primary()
        return [node for node in self.nodes if node is not primary]

    def switchover(self) -> None:
        """A planned switchover as docs/scaling.md has an operator make one (deploy/switchover.py): the
        primary fenced, then the standby made the primary and the primary its standby; returns once done."""
        command = [sys.executable, "-m", "deploy.switchover", *self.switchover_arguments()]
        done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=120)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command[:3])} failed: {done.stdout}{done.stderr}")

    def switchover_arguments(self) -> list[str]:
        """deploy/switchover.py's arguments for this formation: its monitor, and the data nodes' superuser."""
        return ["--monitor", self.monitor_url, "--user", "postgres", "--dbname", self.database]

    @staticmethod
    def execute(node: DataNode, sql: str) -> list[tuple]:
        with psycopg.connect(node.url, connect_timeout=2, autocommit=True) as conn:
            cursor = conn.execute(sql)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        self.guard.stop()
        for node in [*self.nodes, self.monitor]:
            node.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)
        deadline = time.monotonic() + 5  # a PostgreSQL of this formation still exiting keeps its files
        while self.work_dir.exists() and time.monotonic() < deadline:
            shutil.rmtree(self.work_dir, ignore_errors=True)
            time.sleep(0.1)
