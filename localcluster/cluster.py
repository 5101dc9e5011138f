"""`make cluster`'s topology: the front (nginx), HAProxy in front of N production units, Redis, the database.

Each server reads its config from localcluster/config/ (templates whose @NAME@s are filled in here).
`python -m localcluster` runs it until stopped; the tests and `make bench-cluster` start the same classes.
"""

import os
import shutil
import signal
import socket
import subprocess
import tempfile
from pathlib import Path
from urllib.parse import quote

from deploy.probe import probe_host
from deploy.processes import ROOT, render, stop_process, wait_until
from deploy.unit import nginx_command, render_nginx_conf
from localcluster.processes import LocalUnit, ServerProcess, accepts_connections, free_port

CONFIG = ROOT / "localcluster" / "config"
# Where the front and HAProxy connect from, on one machine: the units' nginx trusts their X-Forwarded-For.
BALANCER_ADDRESS = "127.0.0.1"


def as_unprivileged_user() -> dict:
    """Popen arguments that drop root (servers such as pgbouncer refuse it) to `postgres`."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


class Redis:
    """A throwaway redis-server (localcluster/config/redis.conf) on a loopback port, keeping nothing on disk."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def answers(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def start(self) -> "Redis":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian package redis-server)")
        self.process = subprocess.Popen(
            [binary, str(CONFIG / "redis.conf"), "--port", str(self.port)], stdout=subprocess.DEVNULL
        )
        wait_until(self.answers, self.process, 10, "redis-server")
        return self

    def stop(self) -> None:
        stop_process(self.process)


class PgBouncer:
    """A PgBouncer on a loopback port, pooling by transaction in front of the PostgreSQL server of
    `settings_dict` (Django's form of a database URL)."""

    def __init__(self, settings_dict: dict, pool_mode: str = "transaction"):
        self.port = free_port()
        # Its own folder: pgbouncer runs as another user when started as root.
        self.work_dir = work_dir = Path(tempfile.mkdtemp(prefix="plantstore-pgbouncer."))
        self.database = settings_dict["NAME"]
        self.url = f"postgres://{quote(settings_dict['USER'] or 'postgres')}@127.0.0.1:{self.port}/{self.database}"
        backend = f"host={settings_dict['HOST']} port={settings_dict['PORT'] or 5432} dbname={self.database}"
        self.config = render(
            CONFIG / "pgbouncer.ini",
            work_dir / "pgbouncer.ini",
            PORT=str(self.port),
            DATABASE=self.database,
            BACKEND=backend,
            POOL_MODE=pool_mode,
            WORK_DIR=str(work_dir),
        )
        (work_dir / "userlist.txt").write_text(f'"{settings_dict["USER"] or "postgres"}" ""\n')
        self.process: subprocess.Popen | None = None

    @property
    def client_settings(self) -> dict[str, str]:
        """An app server's settings behind it: its URL, and no prepared statements, which PgBouncer
        1.18 in transaction mode cannot keep (.env.example has them on, for a direct connection)."""
        return {"DATABASE_URL": self.url, "DJANGO_DB_PREPARED_STATEMENTS": "0"}

    def start(self) -> "PgBouncer":
        binary = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
        if not Path(binary).exists():
            raise RuntimeError("pgbouncer is not installed (Debian package pgbouncer)")
        if os.geteuid() == 0:
            shutil.chown(self.work_dir, "postgres", "postgres")
        self.process = subprocess.Popen(
            [binary, str(self.config)],
            stdout=subprocess.DEVNULL,
            stderr=(self.work_dir / "stderr.log").open("wb"),
            **as_unprivileged_user(),
        )
        try:
            wait_until(lambda: accepts_connections(self.port), self.process, 10, "pgbouncer")
        except RuntimeError as error:
            raise RuntimeError(f"{error}: {self.log()}") from None
        return self

    def log(self) -> str:
        logs = [self.work_dir / "stderr.log", self.work_dir / "pgbouncer.log"]
        return "".join(path.read_text(errors="replace") for path in logs if path.exists())

    def terminate(self) -> None:
        """Stop the process, keeping its folder, so that start() brings it back on the same port."""
        stop_process(self.process)

    def stop(self) -> None:
        self.terminate()
        shutil.rmtree(self.work_dir, ignore_errors=True)


class HAProxy:
    """HAProxy (localcluster/config/haproxy.cfg) on `port`, balancing over `units`, with its runtime API
    on a unix socket in `work_dir` (drain, maint, ready: the rolling restart's moves)."""

    def __init__(self, port: int, units: list[LocalUnit], work_dir: Path, probe_host: str, supervised: bool = False):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.socket_path = work_dir / "haproxy.sock"
        self.metrics_port = free_port()  # its /metrics (Prometheus' haproxy job)
        self.server_names = [self.server_name(number) for number in range(len(units))]
        servers = "".join(
            f"    server {name} {unit.url.removeprefix('http://')} check\n"
            for name, unit in zip(self.server_names, units, strict=True)
        )
        # Its checks name a host the units allow (deploy/probe.py), as every unit's own probe does.
        self.probe_host = probe_host
        self.config = render(
            CONFIG / "haproxy.cfg",
            work_dir / "haproxy.cfg",
            PORT=str(port),
            PROBE_HOST=self.probe_host,
            SERVERS=servers,
            ERRORS=str(ROOT / "deploy" / "haproxy-errors"),
            ADMIN_SOCKET=str(self.socket_path),
            METRICS_PORT=str(self.metrics_port),
        )
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.server = ServerProcess(
            "haproxy", [binary, "-db", "-f", str(self.config)], dict(os.environ), work_dir / "haproxy.log", supervised
        )

    @staticmethod
    def server_name(number: int) -> str:
        return f"app{number + 1}"

    @property
    def process(self) -> subprocess.Popen | None:
        return self.server.process

    def start(self) -> "HAProxy":
        if not Path(self.server.command[0]).exists():
            raise RuntimeError("haproxy is not installed (Debian package haproxy)")
        self.server.launch()
        # Ready once an app unit has passed its health checks: /healthz through it answers 200.
        self.server.wait_healthy(f"{self.url}/healthz", self.probe_host)
        return self

    def command(self, line: str) -> str:
        """One command on HAProxy's runtime API; its answer."""
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(5)
            conn.connect(str(self.socket_path))
            conn.sendall(line.encode() + b"\n")
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
        return answer.decode()

    def server_stats(self) -> list[dict]:
        """Each app server's `show stat` row, in the units' order, from one `show stat`: status (UP,
        DOWN, DRAIN, MAINT), scur (sessions), check_status, check_duration…"""
        header, *rows = self.command("show stat").splitlines()
        names = header.removeprefix("# ").split(",")
        stats = [dict(zip(names, row.split(","), strict=False)) for row in rows]
        by_name = {stat["svname"]: stat for stat in stats if stat.get("pxname") == "app_servers"}
        try:
            return [by_name[name] for name in self.server_names]
        except KeyError as missing:
            raise RuntimeError(f"haproxy has no server {missing}") from None

    def server_stat(self, number: int) -> dict:
        """The `show stat` row of one app server (server_stats())."""
        return self.server_stats()[number]

    def set_state(self, number: int, state: str) -> None:
        answer = self.command(f"set server app_servers/{self.server_name(number)} state {state}")
        if answer.strip():
            raise RuntimeError(f"haproxy refused `state {state}`: {answer.strip()}")

    def stop(self) -> None:
        self.server.stop()


class Front:
    """The cluster's edge: nginx on `port` with deploy/nginx.conf, the same edge rules as every unit's
    (defined once), in front of HAProxy on `upstream_port`. It reads every request whole before
    HAProxy sees it, so slow clients hold an nginx connection and every refusal of bad HTTP is one of
    its Error bodies (HAProxy 2.6 answers its parser's refusals with a built-in HTML page). It names
    the client in X-Forwarded-For, whatever the client sent."""

    def __init__(self, port: int, upstream_port: int, work_dir: Path, env: dict, supervised: bool = False):
        """`env`: the cluster's settings; the proxies its PLANTS_TRUSTED_PROXIES names (the TLS proxy
        in front) are the front's to believe."""
        self.port, self.upstream_port, self.env = port, upstream_port, env
        self.probe_host = probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))
        self.url = f"http://127.0.0.1:{port}"
        self.run_dir = work_dir / "front"
        self.log_path = work_dir / "front.log"
        self.supervised = supervised
        self.server: ServerProcess | None = None

    @property
    def process(self) -> subprocess.Popen | None:
        return self.server.process if self.server else None

    def start(self) -> "Front":
        self.run_dir.mkdir(mode=0o755, exist_ok=True)
        self.run_dir.chmod(0o755)  # nginx's workers (nobody, when started as root) use its temp folders
        upstream, listen = f"127.0.0.1:{self.upstream_port}", f"127.0.0.1:{self.port}"
        # It waits 40 s for an answer: longer than HAProxy does (timeout server), whose 503 it passes on.
        conf = render_nginx_conf(self.run_dir, upstream, listen, self.env, read_timeout_s=40)
        self.server = ServerProcess(
            "front", nginx_command(self.run_dir, conf), dict(os.environ), self.log_path, self.supervised
        )
        self.server.launch()
        try:
            self.server.wait_healthy(f"{self.url}/healthz", self.probe_host)
        except RuntimeError:
            self.stop()
            raise
        return self

    def log(self) -> str:
        return self.server.log() if self.server else ""

    def stop(self) -> None:
        if self.server:
            self.server.stop(timeout=40, sig=signal.SIGQUIT)  # graceful: answers what it holds


class Cluster:
    """The front (nginx) on `port`, HAProxy behind it in front of `app_servers` production units
    (each nginx and the app server, as if on its own host), and Redis for the rate-limit counters they
    share. The database: `database_url` as it is (one that follows the primary, such as
    localcluster/database.py's FailoverDatabase's, or a managed PostgreSQL's), or one such URL per unit,
    or, with `settings_dict` instead, PgBouncer pooling by transaction in front of that one PostgreSQL."""

    def __init__(
        self,
        settings_dict: dict | None,
        work_dir: Path,
        port: int | None = None,
        app_servers: int = 2,
        supervised: bool = False,
        database_url: str | list[str] | None = None,
        **env: str,
    ):
        self.work_dir = work_dir
        self.redis = Redis()
        # PgBouncer 1.18 cannot follow a primary (it has no target_session_attrs): in front of a
        # failover pair, the app servers connect by the URL that follows it.
        self.pgbouncer = PgBouncer(settings_dict) if database_url is None else None
        database_url = self.pgbouncer.url if self.pgbouncer else database_url
        unit_urls = database_url if isinstance(database_url, list) else [database_url] * app_servers
        self.env = {
            **os.environ,
            "DATABASE_URL": unit_urls[0],  # the first unit's, which a command run beside the cluster uses too
            "REDIS_URL": self.redis.url,
            **env,
            **(self.pgbouncer.client_settings if self.pgbouncer else {}),
            # The front names the client in X-Forwarded-For and HAProxy adds the front's address; each
            # unit's nginx believes only those two, which connect from BALANCER_ADDRESS. The proxies
            # that `env` names (a TLS proxy in front of the cluster) are the front's to believe.
            "PLANTS_TRUSTED_PROXIES": BALANCER_ADDRESS,
        }
        self.units = [
            LocalUnit(
                f"127.0.0.1:{free_port()}",
                {**self.env, "DATABASE_URL": url},
                log=work_dir / f"unit{n + 1}.log",
                supervised=supervised,
                name=f"unit{n + 1}",
            )
            for n, url in enumerate(unit_urls)
        ]
        self.haproxy = HAProxy(free_port(), self.units, work_dir, self.units[0].probe_host, supervised)
        self.front = Front(port or free_port(), self.haproxy.port, work_dir, {**os.environ, **env}, supervised)
        self.url = self.front.url

    def start(self) -> "Cluster":
        try:
            self.redis.start()
            if self.pgbouncer:
                self.pgbouncer.start()
            for unit in self.units:  # launched from this thread (see dying_with_parent), then waited for
                unit.launch()
            for unit in self.units:
                unit.wait_ready()
            self.haproxy.start()
            self.front.start()
        except BaseException:
            self.stop()
            raise
        return self

    def rolling_restart(self, say=lambda line: None) -> None:
        """Restart the units one at a time (a new version): each is drained in HAProxy, stopped once
        its requests are answered, started again, and back in rotation before the next one goes."""
        for number, unit in enumerate(self.units):
            say(f"restarting {unit.name} ({unit.url})")
            self.haproxy.set_state(number, "drain")
            wait_until(lambda n=number: self.haproxy.server_stat(n)["scur"] == "0", None, 40, f"{unit.name} drained")
            self.haproxy.set_state(number, "maint")
            unit.stop()
            unit.start()
            self.haproxy.set_state(number, "ready")
            wait_until(lambda n=number: self.haproxy.server_stat(n)["status"] == "UP", None, 30, f"{unit.name} up")
        say("every unit restarted")

    def stop(self) -> None:
        for server in [self.front, self.haproxy, *self.units, self.pgbouncer, self.redis]:
            if server:
                server.stop()
