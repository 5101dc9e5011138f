"""Live servers for tests that need real processes (gunicorn, redis-server, pgbouncer, haproxy, prometheus),
for make bench and for make cluster."""

import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from string import Template
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"
DEPLOY = ROOT / "deploy" / "cluster"


def render(template: Path, destination: Path, **values: str) -> Path:
    """Write a deploy/cluster template with its $NAMEs filled in (a missing one is an error)."""
    destination.write_text(Template(template.read_text()).substitute(values))
    return destination


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def database_url(settings_dict: dict) -> str:
    """The URL of the database Django's test run is using (PostgreSQL only)."""
    user = quote(settings_dict["USER"] or "")
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict["PASSWORD"] else ""
    host = quote(settings_dict["HOST"] or "", safe="")
    port = f":{settings_dict['PORT']}" if settings_dict["PORT"] else ""
    return f"postgres://{user}{password}@{host}{port}/{settings_dict['NAME']}"


def request(url: str, body=None, token: str | None = None, method: str | None = None, timeout: float = 10):
    """(status, headers, text) of one request; status None when the connection failed."""
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()
    except (OSError, urllib.error.URLError, http.client.HTTPException):
        return None, None, ""


def create_many(url: str, token: str, ids, name: str, threads: int = 8) -> list[tuple]:
    """POST /plants for each id from `threads` client threads; the (status, text) of each answer."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        answers = pool.map(lambda plant_id: request(f"{url}/plants", {"id": plant_id, "name": name}, token), ids)
        return [(status, text) for status, _, text in answers]


class Load:
    """Clients creating unique plants (ids 1, 2, …) until stopped or `limit`, each waiting `pause`
    seconds between its requests; remembers every answer."""

    def __init__(self, url: str, token: str, clients: int = 6, limit: int = 100_000, pause: float = 0):
        self.url, self.token, self.limit, self.pause = url, token, limit, pause
        # (id, status, content type, text, when the request was sent)
        self.answers: list[tuple[int, int | None, str, str, float]] = []
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.next_id = 0
        self.threads = [threading.Thread(target=self.run) for _ in range(clients)]

    def take_id(self) -> int | None:
        with self.lock:
            self.next_id += 1
            return self.next_id if self.next_id <= self.limit else None

    def run(self):
        while not self.stopped.is_set() and (plant_id := self.take_id()) is not None:
            sent = time.monotonic()
            status, headers, text = request(self.url, {"id": plant_id, "name": f"load-{plant_id}"}, self.token)
            content_type = headers.get("Content-Type", "") if headers else ""
            with self.lock:
                self.answers.append((plant_id, status, content_type, text, sent))
            if self.pause:
                self.stopped.wait(self.pause)

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stopped.set()
        for thread in self.threads:
            thread.join(timeout=60)

    def wait_for(self, count: int, timeout: float = 60):
        deadline = time.monotonic() + timeout
        while len(self.answers) < count and time.monotonic() < deadline:
            time.sleep(0.01)

    def ids_with(self, status) -> set[int]:
        return {plant_id for plant_id, answer_status, *_ in self.answers if answer_status == status}


def stop_process(process: subprocess.Popen | None, timeout: float = 15) -> None:
    """SIGTERM a server and wait for it; SIGKILL it if it has not stopped within `timeout`."""
    if process and process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def wait_until_healthy(
    url: str, process: subprocess.Popen, timeout: float, expected: int = 200, path: str = "/healthz"
) -> bool:
    """Poll `url` + `path` until it answers `expected`; False if `process` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if request(f"{url}{path}", timeout=2)[0] == expected:
            return True
        time.sleep(0.1)
    return False


class LiveServer:
    """A server process on a free loopback port, its output appended to a log in `log_dir`, ready
    once its /healthz answers: gunicorn for the tests, and the servers `make bench` runs beside it.
    `command` may name the port as `{port}`."""

    def __init__(self, name: str, command: list[str], log_dir: Path, **env: str):
        self.name = name
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [part.format(port=self.port) for part in command]
        self.log_path = log_dir / f"{name}-{self.port}.log"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen | None = None

    def launch(self) -> None:
        """Start the process without waiting for it to answer."""
        # Appended: a server started again (after kill()) keeps its earlier output in the same log.
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)

    def start(self, expect_health: int = 200) -> "LiveServer":
        """launch(), then wait for /healthz; on any failure, Ctrl-C included, stop what was started."""
        try:
            self.launch()
            if not wait_until_healthy(self.url, self.process, timeout=30, expected=expect_health):
                raise RuntimeError(f"{self.name}'s /healthz did not answer {expect_health}: {self.log()}")
        except BaseException:
            self.stop()
            raise
        return self

    def pids(self) -> list[int]:
        """The processes whose CPU this server's work costs, with their descendants (its workers)."""
        return [self.process.pid]

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        # multiprocessing's resource tracker may be a child too; the workers are the others.
        return [int(pid) for pid in children if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the master and its workers at once, as a host dying would; start() brings it back."""
        for pid in [self.process.pid, *self.worker_pids()]:
            os.kill(pid, signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        stop_process(self.process)


class LiveGunicorn(LiveServer):
    """gunicorn with gunicorn.conf.py and debug off, as in production, on a free port: for the
    tests (plantstore_site.wsgi, 2 workers of 4 threads unless `env` says otherwise) and for
    `make bench` (bench.wsgi)."""

    def __init__(self, log_dir: Path, app: str = "plantstore_site.wsgi", **env: str):
        super().__init__("gunicorn", [str(GUNICORN), "-c", "gunicorn.conf.py", app], log_dir)
        self.env = {
            **self.env,
            "DJANGO_SETTINGS_MODULE": "plantstore_site.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": "live-test-secret-key-" + "x" * 40,
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "PLANTS_THROTTLE_RATE": "",
            "GUNICORN_BIND": f"127.0.0.1:{self.port}",
            "GUNICORN_WORKERS": "2",
            "GUNICORN_THREADS": "4",
            # Its own metrics folder, beside its log (gunicorn.conf.py empties it at start).
            "PROMETHEUS_MULTIPROC_DIR": str(log_dir / f"metrics-{self.port}"),
            **env,
        }


class LiveRedis:
    """A throwaway redis-server (deploy/cluster/redis.conf) on a loopback port, keeping nothing on disk."""

    def __init__(self):
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen | None = None

    def start(self) -> "LiveRedis":
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (Debian package redis-server)")
        self.process = subprocess.Popen(
            [binary, str(DEPLOY / "redis.conf"), "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as conn:
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("redis-server did not start")

    def stop(self) -> None:
        stop_process(self.process)


def as_unprivileged_user() -> dict:
    """Popen arguments that drop root (servers such as pgbouncer refuse it) to `postgres`."""
    return {"user": "postgres", "group": "postgres"} if os.geteuid() == 0 else {}


class LivePgBouncer:
    """A throwaway PgBouncer on a loopback port, pooling by transaction in front of the PostgreSQL
    server of `settings_dict` (a unix socket, as scripts/with-postgres serves it)."""

    def __init__(self, settings_dict: dict, pool_mode: str = "transaction"):
        self.port = free_port()
        # Its own folder: pytest's are private to root, and pgbouncer runs as another user.
        self.work_dir = work_dir = Path(tempfile.mkdtemp(prefix="plantstore-pgbouncer."))
        self.database = settings_dict["NAME"]
        self.url = f"postgres://{quote(settings_dict['USER'] or 'postgres')}@127.0.0.1:{self.port}/{self.database}"
        backend = f"host={settings_dict['HOST']} port={settings_dict['PORT'] or 5432} dbname={self.database}"
        self.config = render(
            DEPLOY / "pgbouncer.ini",
            work_dir / "pgbouncer.ini",
            PORT=str(self.port),
            DATABASE=self.database,
            BACKEND=backend,
            POOL_MODE=pool_mode,
            WORK_DIR=str(work_dir),
        )
        (work_dir / "userlist.txt").write_text(f'"{settings_dict["USER"] or "postgres"}" ""\n')
        self.process: subprocess.Popen | None = None

    def start(self) -> "LivePgBouncer":
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
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"pgbouncer did not start: {self.log()}")

    def log(self) -> str:
        logs = [self.work_dir / "stderr.log", self.work_dir / "pgbouncer.log"]
        return "".join(path.read_text(errors="replace") for path in logs if path.exists())

    def terminate(self) -> None:
        """Stop the process, keeping its folder, so that start() brings it back on the same port."""
        stop_process(self.process)

    def stop(self) -> None:
        self.terminate()
        shutil.rmtree(self.work_dir, ignore_errors=True)


class LivePrometheus:
    """A throwaway Prometheus (deploy/cluster/prometheus.yml) scraping `targets` every second with
    the metrics token, its data in a temp dir."""

    def __init__(self, targets: list[str], metrics_token: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.work_dir = work_dir = Path(tempfile.mkdtemp(prefix="plantstore-prometheus."))
        token_file = work_dir / "metrics-token"
        token_file.touch(mode=0o600)
        token_file.write_text(metrics_token)
        self.config = render(
            DEPLOY / "prometheus.yml",
            work_dir / "prometheus.yml",
            SCRAPE_INTERVAL="1s",
            TARGETS=json.dumps(targets),
            METRICS_TOKEN_FILE=str(token_file),
        )
        self.process: subprocess.Popen | None = None

    def start(self) -> "LivePrometheus":
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus is not installed (Debian package prometheus)")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.work_dir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=(self.work_dir / "prometheus.log").open("wb"),
        )
        if not wait_until_healthy(self.url, self.process, timeout=30, path="/-/ready"):
            raise RuntimeError(f"prometheus did not start: {self.log()}")
        return self

    def query(self, promql: str) -> dict[tuple, float]:
        """An instant query's vector: {(label values, sorted by label name): value}."""
        status, _, text = request(f"{self.url}/api/v1/query?{urlencode({'query': promql})}")
        if status != 200:
            raise RuntimeError(f"prometheus answered {status}: {text}")
        return {
            tuple(value for _, value in sorted(sample["metric"].items())): float(sample["value"][1])
            for sample in json.loads(text)["data"]["result"]
        }

    def log(self) -> str:
        path = self.work_dir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.work_dir, ignore_errors=True)


class LiveHaproxy:
    """HAProxy (deploy/cluster/haproxy.cfg) on `port`, balancing over the servers at `urls`."""

    def __init__(self, port: int, urls: list[str], work_dir: Path):
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        servers = "".join(
            f"    server app{number} {url.removeprefix('http://')} check\n" for number, url in enumerate(urls, 1)
        )
        self.config = render(
            DEPLOY / "haproxy.cfg",
            work_dir / "haproxy.cfg",
            PORT=str(port),
            SERVERS=servers,
            ERRORS=str(DEPLOY / "errors"),
        )
        self.log_path = work_dir / "haproxy.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "LiveHaproxy":
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        if not Path(binary).exists():
            raise RuntimeError("haproxy is not installed (Debian package haproxy)")
        self.process = subprocess.Popen(
            [binary, "-db", "-f", str(self.config)], stdout=subprocess.DEVNULL, stderr=self.log_path.open("wb")
        )
        # Ready when every app server has passed its health check: /healthz through it answers 200.
        if not wait_until_healthy(self.url, self.process, timeout=30):
            raise RuntimeError(f"haproxy did not start: {self.log_path.read_text(errors='replace')}")
        return self

    def stop(self) -> None:
        stop_process(self.process)


class LiveCluster:
    """`make cluster`'s topology on one machine, as it runs across hosts: HAProxy on `port` in front
    of `app_servers` gunicorns (separate process trees), PgBouncer pooling by transaction in front
    of the PostgreSQL of `settings_dict`, and Redis for the throttle counters they share."""

    def __init__(self, settings_dict: dict, work_dir: Path, port: int | None = None, app_servers: int = 2, **env):
        self.work_dir = work_dir
        self.redis = LiveRedis()
        self.pgbouncer = LivePgBouncer(settings_dict)
        app_env = {
            "DATABASE_URL": self.pgbouncer.url,
            "DJANGO_DB_PREPARED_STATEMENTS": "0",  # PgBouncer 1.18 in transaction mode
            "REDIS_URL": self.redis.url,
            **env,
        }
        self.apps = [LiveGunicorn(work_dir, **app_env) for _ in range(app_servers)]
        self.haproxy = LiveHaproxy(port or free_port(), [app.url for app in self.apps], work_dir)
        self.url = self.haproxy.url

    def start(self) -> "LiveCluster":
        try:
            self.redis.start()
            self.pgbouncer.start()
            with ThreadPoolExecutor(max_workers=len(self.apps)) as pool:
                list(pool.map(LiveGunicorn.start, self.apps))
            self.haproxy.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for server in [self.haproxy, *self.apps, self.pgbouncer, self.redis]:
            server.stop()
