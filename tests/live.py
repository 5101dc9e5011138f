"""Live servers for the tests, started through deploy/ (production units, the cluster), and clients
that load them: requests, many creates, a steady load."""

import fcntl
import functools
import http.client
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import termios
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from functools import partial
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import quote, urlencode

import yaml

from deploy.processes import ROOT, children, http_status, render, stop_process, wait_until
from localcluster.cluster import BALANCER_ADDRESS, CONFIG, Cluster
from localcluster.processes import LocalUnit, command_line, descendants, free_port


def database_url(settings_dict: dict) -> str:
    """The URL of the database Django's test run is using (PostgreSQL only)."""
    user = quote(settings_dict["USER"] or "")
    password = f":{quote(settings_dict['PASSWORD'])}" if settings_dict["PASSWORD"] else ""
    host = quote(settings_dict["HOST"] or "", safe="")
    port = f":{settings_dict['PORT']}" if settings_dict["PORT"] else ""
    return f"postgres://{user}{password}@{host}{port}/{settings_dict['NAME']}"


def production_settings(**replaced: str) -> dict:
    """.env.example's settings, as an operator deploys them, with `replaced` in place of its own
    (the secrets, the database, the listener, the trusted proxy: what every deployment sets itself);
    a value of None drops the setting."""
    settings = {}
    for line in (ROOT / ".env.example").read_text().splitlines():
        name, equals, value = line.partition("=")
        if equals and not name.startswith("#"):
            settings[name.strip()] = value.strip()
    settings.update(replaced)
    return {name: value for name, value in settings.items() if value is not None}


# The public host name of every live unit: .env.example's, as an operator deploys it (never
# looked up: the tests connect to loopback addresses and name it in the Host header).
PUBLIC_HOST = production_settings()["DJANGO_ALLOWED_HOSTS"].split(",")[0]
# Where the TLS proxy in front of a unit connects from (its PLANTS_TRUSTED_PROXIES): the tests send
# their requests from there, with the headers it adds to each, as production's requests arrive.
TLS_PROXY_ADDRESS = "127.0.0.10"
# The 503 Error body's message for a request that waited too long for an app thread (plants/middleware.py).
TOO_BUSY = re.compile(r"The service is too busy: the request waited (\d+\.\d) s to be served; retry later\.")
PROXY_HEADERS = {"Host": PUBLIC_HOST, "X-Forwarded-Proto": "https", "X-Forwarded-For": "127.0.0.1"}


class ProxiedConnection(http.client.HTTPConnection):
    """A connection from the TLS proxy's address to the unit on `port`, whose requests arrive as the
    proxy sends on those of the client at `client` (HAProxy's `option forwardfor` and a set
    X-Forwarded-Proto, as tests/topologies.py's TlsProxy): the client's headers, Host the public
    name unless it sent one, `client` appended to any X-Forwarded-For it sent, X-Forwarded-Proto https."""

    def __init__(self, port: int, client: str = "127.0.0.1", timeout: float = 10, proxy: str = TLS_PROXY_ADDRESS):
        super().__init__("127.0.0.1", port, timeout=timeout, source_address=(proxy, 0))
        self.client = client

    def request(self, method, url, body=None, headers=None, **kwargs):
        headers = {"Host": PUBLIC_HOST, **(headers or {})}
        forwarded = headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{forwarded}, {self.client}" if forwarded else self.client
        headers["X-Forwarded-Proto"] = "https"
        super().request(method, url, body, headers, **kwargs)


class Browser:
    """A browser at one loopback address whose requests reach the unit through the TLS proxy (at the
    loopback address `proxy`), keeping its cookies."""

    def __init__(self, port: int, address: str, proxy: str = TLS_PROXY_ADDRESS):
        self.port, self.address, self.proxy, self.cookies = port, address, proxy, SimpleCookie()

    def send(self, method: str, path: str, form: dict | None = None, headers: dict | None = None):
        """(status, headers, text) of one request, on a new connection from this browser's address."""
        # Through the TLS proxy: the page's origin is the public host's, over HTTPS.
        conn = ProxiedConnection(self.port, client=self.address, timeout=30, proxy=self.proxy)
        origin = f"https://{PUBLIC_HOST}"
        sent = {"Accept": "text/html", **(headers or {})}
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{name}={morsel.value}" for name, morsel in self.cookies.items())
        body = None
        if form is not None:
            body = urlencode(form)
            sent.update({"Content-Type": "application/x-www-form-urlencoded", "Origin": origin})
        try:
            conn.request(method, path, body, sent)
            response = conn.getresponse()
            text = response.read().decode()
        finally:
            conn.close()
        for cookie in response.msg.get_all("Set-Cookie") or []:
            self.cookies.load(cookie)
        return response.status, response.msg, text

    def log_in(self, username: str, password: str, headers: dict | None = None):
        """GET the login page (CSRF cookie and token), then POST its form, as a person does."""
        _, _, page = self.send("GET", "/admin/login/?next=/admin/")
        csrf = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        form = {"csrfmiddlewaretoken": csrf, "username": username, "password": password, "next": "/admin/"}
        return self.send("POST", "/admin/login/?next=/admin/", form, headers)


class PublicHostTlsConnection(http.client.HTTPSConnection):
    """A client's HTTPS connection whose requests name the public host unless they name another."""

    def request(self, method, url, body=None, headers=None, **kwargs):
        super().request(method, url, body, {"Host": PUBLIC_HOST, **(headers or {})}, **kwargs)


class NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer to assert, never followed: it names the public host, which is no
    address of this machine."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


@functools.cache
def opener(source: str | None) -> urllib.request.OpenerDirector:
    """urllib's http:// connections made from the loopback address `source` (None: any), redirects not followed."""

    class FromSource(urllib.request.HTTPHandler):
        def http_open(self, req):
            return self.do_open(partial(http.client.HTTPConnection, source_address=(source or "", 0)), req)

    return urllib.request.build_opener(FromSource, NoRedirects)


def request(
    url: str,
    body=None,
    token: str | None = None,
    method: str | None = None,
    timeout: float = 10,
    proxy: str | None = TLS_PROXY_ADDRESS,
    **headers: str,
):
    """(status, headers, text) of one request to the public host name, sent as the proxy at the
    loopback address `proxy` sends a client's on (the TLS proxy, or a cluster's balancer), or, with
    no proxy, by the client itself; `headers` (underscores for dashes) in place of its own. Status
    None when no answer came, the text then saying why."""
    headers = {
        **(PROXY_HEADERS if proxy else {"Host": PUBLIC_HOST}),
        "Content-Type": "application/json",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with opener(proxy).open(req, timeout=timeout) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()
    except (OSError, urllib.error.URLError, http.client.HTTPException) as error:
        # No answer. The text tells where: "URLError: <urlopen error timed out>", the connection never
        # made (or the request never sent) in time; "TimeoutError: timed out", sent, and no answer in time;
        # "RemoteDisconnected", "ConnectionResetError", "ConnectionRefusedError": the connection's end.
        return None, None, f"{type(error).__name__}: {error}"


def create_many(url: str, token: str, ids, name: str, threads: int = 8) -> list[tuple]:
    """POST /plants for each id from `threads` client threads; the (status, text) of each answer."""
    with ThreadPoolExecutor(max_workers=threads) as pool:
        answers = pool.map(lambda plant_id: request(f"{url}/plants", {"id": plant_id, "name": name}, token), ids)
        return [(status, text) for status, _, text in answers]


class Load:
    """Clients creating unique plants (ids `first_id`, the next, …) until stopped or `limit` of them,
    each waiting `pause` seconds between its requests, each waiting up to `timeout` seconds for its
    answer; remembers every answer. With `retry`, a client sends a create answered 503 (or not
    answered) again, as the README advises, `pause` (at least 0.1 s) later, until it is answered
    otherwise or the load stops. Sent as the proxy at `proxy` sends them on (request() says how)."""

    def __init__(
        self,
        url: str,
        token: str,
        clients: int = 6,
        limit: int = 100_000,
        pause: float = 0,
        timeout: float = 10,
        retry: bool = False,
        first_id: int = 1,
        proxy: str | None = TLS_PROXY_ADDRESS,
    ):
        self.url, self.token, self.limit, self.pause, self.timeout = url, token, limit, pause, timeout
        self.retry, self.first_id, self.proxy = retry, first_id, proxy
        # (id, status, content type, text, when the request was sent)
        self.answers: list[tuple[int, int | None, str, str, float]] = []
        self.stopped = threading.Event()
        self.lock = threading.Lock()
        self.next_id = 0
        self.threads = [threading.Thread(target=self.run) for _ in range(clients)]

    def take_id(self) -> int | None:
        with self.lock:
            self.next_id += 1
            return self.first_id - 1 + self.next_id if self.next_id <= self.limit else None

    def run(self):
        while not self.stopped.is_set() and (plant_id := self.take_id()) is not None:
            while self.create(plant_id) in (503, None) and self.retry and not self.stopped.wait(max(self.pause, 0.1)):
                pass
            if self.pause:
                self.stopped.wait(self.pause)

    def create(self, plant_id: int) -> int | None:
        sent = time.monotonic()
        status, headers, text = request(
            self.url,
            {"id": plant_id, "name": f"load-{plant_id}"},
            self.token,
            timeout=self.timeout,
            proxy=self.proxy,
        )
        content_type = headers.get("Content-Type", "") if headers else ""
        with self.lock:
            self.answers.append((plant_id, status, content_type, text, sent))
        return status

    def __enter__(self):
        self.started = time.monotonic()
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


def wait_until_healthy(
    url: str,
    process: subprocess.Popen,
    timeout: float,
    expected: int = 200,
    path: str = "/healthz",
    host: str = PUBLIC_HOST,
) -> bool:
    """Poll `url` + `path` (naming `host`) until it answers `expected`; False if `process` exits or
    time runs out."""
    try:
        wait_until(lambda: http_status(f"{url}{path}", host=host) == expected, process, timeout, url)
    except RuntimeError:
        return False
    return True


# .env.example's settings with only what every deployment replaces replaced: the secrets, the
# trusted proxy (the tests' TLS proxy); the database and the listener are each test's own.
DEPLOYED_SETTINGS = production_settings(
    DJANGO_SETTINGS_MODULE="plantstore_site.settings",
    DJANGO_SECRET_KEY="live-test-secret-key-" + "x" * 40,
    PLANTS_METRICS_TOKEN="live-test-metrics-token-" + "y" * 16,
    PLANTS_TRUSTED_PROXIES=TLS_PROXY_ADDRESS,
    DATABASE_URL=None,
    PLANTS_LISTEN=None,
)
# A live server's settings in the tests, unless a test says otherwise: those (debug off, the
# public host name alone allowed, HTTPS redirect behind the TLS proxy's header), with no rate
# limit per token, 2 worker processes of 4 threads. The limit on failed authentication stays on,
# as in production, at .env.example's rate: it never refuses a valid token.
LIVE_SETTINGS = {
    **DEPLOYED_SETTINGS,
    "PLANTS_THROTTLE_RATE": "",
    "APP_PROCESSES": "2",
    "APP_THREADS": "4",
}


def live_env(**env: str) -> dict:
    return {**os.environ, **LIVE_SETTINGS, **env}


class LiveUnit(LocalUnit):
    """A LocalUnit whose start() also waits for every app worker (wait_for_app_workers)."""

    def start(self, timeout: float = 60) -> "LiveUnit":
        super().start(timeout)
        wait_for_app_workers(self.log, self.app.process)
        return self


def manage_on(database_url: str, *arguments: str) -> str:
    """manage.py as an operator runs it on the production host, with its settings, on `database_url`:
    its output."""
    command = [sys.executable, "manage.py", *arguments]
    env = live_env(DATABASE_URL=database_url)
    return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip()


def live_unit(log_dir: Path, **env: str) -> LiveUnit:
    """A production unit (deploy/unit.py: nginx, then the app server) on a free loopback port, with
    live_env(**env), its output in a log in `log_dir`; start() it (and wait for all its app workers)."""
    port = free_port()
    return LiveUnit(f"127.0.0.1:{port}", live_env(**env), log=log_dir / f"unit-{port}.log", name=f"unit-{port}")


def live_cluster(
    settings_dict: dict | None, work_dir: Path, database_url: str | list[str] | None = None, **env: str
) -> Cluster:
    """make cluster's topology (localcluster/cluster.py) with LIVE_SETTINGS, on `database_url` (such as a
    FailoverDatabase's, or one per unit), or else through PgBouncer on the one database of `settings_dict`."""
    return Cluster(settings_dict, work_dir, database_url=database_url, **{**LIVE_SETTINGS, **env})


def entry_points(cluster: Cluster) -> list[tuple[str, str]]:
    """Where requests reach `cluster`, and the proxy each comes from: every unit as its balancer
    sends them on, then the front as the TLS proxy does: (url, the proxy's address)."""
    return [(unit.url, BALANCER_ADDRESS) for unit in cluster.units] + [(cluster.url, TLS_PROXY_ADDRESS)]


# The service's objectives and alerts, which LivePrometheus loads and evaluates every second.
ALERT_RULES = ROOT / "deploy" / "prometheus" / "plantstore-alerts.yml"


def alert_rules() -> list[dict]:
    """ALERT_RULES' rules, recording and alerting, in order."""
    return [rule for group in yaml.safe_load(ALERT_RULES.read_text())["groups"] for rule in group["rules"]]


class LivePrometheus:
    """A throwaway Prometheus (localcluster/config/prometheus.yml) scraping `targets` every second with
    the metrics token and evaluating ALERT_RULES, its data in a temp dir."""

    def __init__(self, targets: list[str], metrics_token: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.work_dir = work_dir = Path(tempfile.mkdtemp(prefix="plantstore-prometheus."))
        token_file = work_dir / "metrics-token"
        token_file.touch(mode=0o600)
        token_file.write_text(metrics_token)
        self.config = render(
            CONFIG / "prometheus.yml",
            work_dir / "prometheus.yml",
            SCRAPE_INTERVAL="1s",
            TARGETS=json.dumps(targets),
            METRICS_TOKEN_FILE=str(token_file),
            ALERT_RULES=json.dumps(str(ALERT_RULES)),
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
        status, _, text = request(f"{self.url}/api/v1/query?{urlencode({'query': promql})}", proxy=None)
        if status != 200:
            raise RuntimeError(f"prometheus answered {status}: {text}")
        return {
            tuple(value for _, value in sorted(sample["metric"].items())): float(sample["value"][1])
            for sample in json.loads(text)["data"]["result"]
        }

    def rules(self) -> dict[str, str]:
        """Every rule loaded, by name (a recording rule's or an alert's), and its health: ok once it has
        been evaluated without error, err, or unknown before its first evaluation."""
        status, _, text = request(f"{self.url}/api/v1/rules", proxy=None)
        if status != 200:
            raise RuntimeError(f"prometheus answered {status}: {text}")
        return {rule["name"]: rule["health"] for group in json.loads(text)["data"]["groups"] for rule in group["rules"]}

    def log(self) -> str:
        path = self.work_dir / "prometheus.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process)
        shutil.rmtree(self.work_dir, ignore_errors=True)


def start_make(target: str, env: dict, log: Path, **popen) -> subprocess.Popen:
    """`make TARGET` as a developer runs it, on this venv (already set up: make must not reinstall
    it), in its own session, its output to `log` (`popen` may send stderr elsewhere)."""
    venv = Path(sys.executable).parent.parent
    command = ["make", f"VENV={venv}", "-o", f"{venv}/.runtime", target]
    with log.open("ab") as output:
        options = {"stderr": subprocess.STDOUT, "start_new_session": True, **popen}
        return subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, **options)


def wait_for_app_workers(log: Callable[[], str], process: subprocess.Popen, timeout: float = 60) -> None:
    """Wait until Granian has logged every worker it spawned as started. /healthz answers as soon as
    one worker serves: a test that takes the app server's processes, or loads each worker, needs them all."""
    wait_until(
        lambda: (text := log()).count("Started worker-") >= text.count("Spawning worker-"),
        process,
        timeout,
        "the app server's workers",
    )


class MakeServe:
    """`make serve` as an operator runs it, on a throwaway SQLite database in `work_dir` (or the file
    `database`), in its own session; `terminal` (a pty's slave fd) makes that terminal its controlling terminal."""

    def __init__(self, work_dir: Path, terminal: int | None = None, database: Path | None = None, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.database = database or work_dir / "db.sqlite3"
        self.log_path = work_dir / "serve.log"
        self.terminal = terminal
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "APP_", "PLANTS_"))},
            **LIVE_SETTINGS,
            "DATABASE_URL": f"sqlite:///{self.database}",
            "DJANGO_SECRET_KEY": "serve-test-secret-key-" + "x" * 40,
            "DJANGO_STATIC_ROOT": str(work_dir / "static"),
            "PLANTS_LISTEN": f"127.0.0.1:{self.port}",
            "PORT": str(self.port),
            **env,
        }
        self.process: subprocess.Popen | None = None

    def start(self) -> "MakeServe":
        if self.terminal is None:
            self.process = start_make("serve", self.env, self.log_path)
        else:  # the terminal is stdin and stderr (what make serve's own messages go to), the log stdout
            self.process = start_make(
                "serve",
                self.env,
                self.log_path,
                stdin=self.terminal,
                stderr=self.terminal,
                preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
            )
        # Ready as the unit says it is: once /livez answers (its dependencies may still be down).
        if not wait_until_healthy(self.url, self.process, timeout=90, path="/livez"):
            self.stop()
            raise RuntimeError(f"make serve did not come up:\n{self.log()}")
        wait_for_app_workers(self.log, self.process)
        return self

    def manage(self, *args: str) -> str:
        command = [sys.executable, "manage.py", *args]
        return subprocess.run(command, cwd=ROOT, env=self.env, check=True, capture_output=True, text=True).stdout

    def token(self) -> str:
        return self.manage("token", "issue", "serve-client").strip()

    def descendants(self) -> list[int]:
        """Every process make serve started, however deep: deploy/serve.py, nginx's, the app server's."""
        return descendants(self.process.pid)

    def pid_of(self, name: bytes) -> int:
        """The first of make serve's processes whose command line contains `name`."""
        return next(pid for pid in self.descendants() if name in command_line(pid))

    def unit_folder(self) -> Path:
        """The unit's temp folder, named in nginx's command line (-p)."""
        cmdline = Path(f"/proc/{self.pid_of(b'nginx: master')}/cmdline").read_bytes().decode()
        return Path(cmdline.split("-p ")[1].split(" ")[0])

    def app_workers(self) -> list[int]:
        """The app server's workers: the children of its main process, the first Granian among make serve's processes."""
        return children(self.pid_of(b"bin/granian"))

    def stored_ids(self) -> set[int]:
        with closing(sqlite3.connect(self.database)) as connection:  # sqlite3's own `with` does not close
            return {row[0] for row in connection.execute("SELECT id FROM plants_plant")}

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            self.process.wait(timeout=60)


def wait_for_exit(pids: list[int], timeout: float = 45) -> list[int]:
    """The pids among `pids` still running after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while (alive := [pid for pid in pids if running(pid)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


def running(pid: int) -> bool:
    """Whether `pid` is a process that has not exited: neither gone nor a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone before, or while, /proc was read
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
