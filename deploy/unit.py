"""The production unit: nginx on the public address in front of the app server on a unix socket.

Defined once, here: `make serve` runs one (deploy/serve.py), `make cluster` runs several behind
HAProxy (deploy/cluster.py), and the tests and the bench start theirs through this class, so what
they prove is what production runs.
"""

import grp
import ipaddress
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from deploy.app_server import APP_ENVIRONMENT, WORKER_STOP_S, granian_command
from deploy.probe import probe_host
from deploy.processes import ROOT, ServerProcess, accepts_unix_connections, children, http_status, wait_until

NGINX_TEMPLATE = ROOT / "deploy" / "nginx.conf"
# Who nginx's workers run as when it is started as root: they alone (and root) may open the app's socket.
NGINX_WORKER_USER, NGINX_WORKER_GROUP = "nobody", "nogroup"
# nginx's idle timeout on its upstream connections: below every HTTP upstream's own (Granian's
# 30 s, deploy/app_server.py: KEEP_ALIVE_IDLE_S; HAProxy's `timeout http-keep-alive` 10 s in
# deploy/cluster/haproxy.cfg; gunicorn's keepalive 5 s; uvicorn's --timeout-keep-alive 5 s), so
# nginx closes an idle connection before the upstream does and never sends a request on one the
# upstream is closing: nginx does not resend a POST that failed once sent, so the client would get
# its 502 (our 503) (tests/test_upstream_keepalive.py).
UPSTREAM_IDLE_S = 4
# How long nginx waits for the app's answer before it answers 503 itself: a unit's (the request's
# thread is not reclaimed: docs/operating.md, Running it); the cluster's front waits longer (deploy/cluster.py).
READ_TIMEOUT_S = 30
# How long a stopping nginx worker (a stop, or the old one at a reload) may finish what it holds
# before it closes the rest (nginx's worker_shutdown_timeout): above READ_TIMEOUT_S, under the 40 s
# Unit.stop gives nginx.
NGINX_SHUTDOWN_S = 35


def networks(env: dict, name: str) -> list[str]:
    """The setting `name` of `env` (comma-separated addresses or networks) checked, one per item."""
    found = []
    for item in filter(None, (part.strip() for part in env.get(name, "").split(","))):
        try:
            found.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise SystemExit(f"{name}: {item!r} is not an address or network") from None
    return found


def client_rule(clients: list[str]) -> str:
    """nginx's access rules for a location served only to `clients`; none when the list is empty (all)."""
    return "".join(f"\n            allow {client};" for client in clients) + (
        "\n            deny all;" if clients else ""
    )


def render_nginx_conf(
    run_dir: Path, upstream: str, listen: str, env: dict, edit=None, name: str = "nginx.conf"
) -> Path:
    """deploy/nginx.conf for nginx listening on `listen`, in front of `upstream` (unix:/path), as
    `name` in `run_dir`, with the settings of `env` it reads (PLANTS_TRUSTED_PROXIES,
    PLANTS_ADMIN_CLIENTS, PLANTS_METRICS_CLIENTS); `edit(text)`, if given, changes the result
    (the bench puts other app servers behind it)."""
    proxies = networks(env, "PLANTS_TRUSTED_PROXIES")
    real_ip = "".join(f"set_real_ip_from {proxy};\n        " for proxy in proxies)
    if proxies:
        # The client is the last address in X-Forwarded-For that is not a trusted proxy's.
        real_ip += "real_ip_header X-Forwarded-For;\n        real_ip_recursive on;"
    trusted = "".join(f"\n        {proxy} 1;" for proxy in proxies)
    text = NGINX_TEMPLATE.read_text()
    for placeholder, value in {
        # As root, nginx's workers drop to nobody; otherwise they run as whoever started it.
        "@USER@": f"user {NGINX_WORKER_USER} {NGINX_WORKER_GROUP};" if os.geteuid() == 0 else "",
        "@LISTEN@": listen,
        "@RUN_DIR@": str(run_dir),
        "@UPSTREAM@": upstream,
        "@UPSTREAM_IDLE@": f"{UPSTREAM_IDLE_S}s",
        "@READ_TIMEOUT@": f"{READ_TIMEOUT_S}s",
        "@WORKER_SHUTDOWN@": f"{NGINX_SHUTDOWN_S}s",
        "@REAL_IP@": real_ip,
        "@TRUSTED_PROXIES@": trusted,
        "@ADMIN_CLIENTS@": client_rule(networks(env, "PLANTS_ADMIN_CLIENTS")),
        "@METRICS_CLIENTS@": client_rule(networks(env, "PLANTS_METRICS_CLIENTS")),
    }.items():
        text = text.replace(placeholder, value)
    if edit:
        text = edit(text)
    path = run_dir / name
    path.write_text(text)
    return path


def http_upstream(keepalive: bool, idle_s: int = UPSTREAM_IDLE_S, read_timeout_s: int = READ_TIMEOUT_S):
    """An edit for render_nginx_conf: nginx's upstream keep-alive (as nginx's users configure it;
    idle connections closed after `idle_s`) or a new connection per request, and `read_timeout_s`
    to wait for an answer. The cluster's front and the bench's other app servers use it."""

    def edit(text: str) -> str:
        def upstream_block(match: re.Match) -> str:
            block = re.sub(r"keepalive_timeout \d+s;", f"keepalive_timeout {idle_s}s;", match.group())
            return block if keepalive else re.sub(r"\n *keepalive(_timeout|_requests)? [^;]+;", "", block)

        text, blocks = re.subn(r"upstream app \{[^}]*keepalive_timeout \d+s;[^}]*\}", upstream_block, text)
        text, timeouts = re.subn(r"proxy_read_timeout \d+s;", f"proxy_read_timeout {read_timeout_s}s;", text)
        if (blocks, timeouts) != (1, 1):
            raise RuntimeError("deploy/nginx.conf has no upstream keepalive_timeout or no proxy_read_timeout")
        return text

    return edit


def nginx_command(run_dir: Path, conf: Path) -> list[str]:
    return [shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(run_dir), "-c", str(conf), "-g", "daemon off;"]


def empty_metrics_folder(folder: Path) -> None:
    """A server's metric files start from nothing, or a restarted server would go on from its last run's counts."""
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()


class Unit:
    """nginx on `listen` (host:port) in front of the app server (`app_command`, default Granian as
    deploy/app_server.py runs it; `{socket}` in it names the socket) on a unix socket in the unit's
    own temp folder, removed when it stops.

    `env` is the app server's environment (settings; PLANTS_TRUSTED_PROXIES is nginx's too);
    output goes to `log`, or to this process's stdout. start(), reload() and stop() are the
    operator's three moves; kill() is a host dying. `nginx_edit` is the bench's (render_nginx_conf).
    """

    def __init__(
        self,
        listen: str,
        env: dict,
        app_command: list[str] | None = None,
        log: Path | None = None,
        supervised: bool = False,
        name: str = "unit",
        nginx_edit=None,
    ):
        self.listen, self.env, self.log_path, self.supervised, self.name = listen, env, log, supervised, name
        self.app_command = app_command or granian_command(env)
        self.nginx_edit = nginx_edit
        # The Host its own probes send (deploy/probe.py): one the app allows, whatever clients use.
        self.probe_host = probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))
        host, _, port = listen.rpartition(":")
        self.port = int(port)
        self.url = f"http://{'127.0.0.1' if host in ('', '0.0.0.0', '*') else host}:{self.port}"
        self.run_dir: Path | None = None
        self.generation = 0  # the app server's: one more at each reload, which starts a new one on a new socket
        self.app: ServerProcess | None = None
        self.nginx: ServerProcess | None = None
        # The app server a reload replaced, until retire() stops it: (server, socket, nginx's old
        # workers, when their worker_shutdown_timeout has passed).
        self.retiring: tuple | None = None

    @property
    def socket_path(self) -> Path:
        """The socket of the app server now serving: each reload's app server gets a new one."""
        return self.run_dir / f"app.{self.generation}.sock"

    def launch(self) -> None:
        """Start the app server, then nginx once the app's socket accepts; do not wait for /livez."""
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"plantstore-{self.name}."))
        self.run_dir.chmod(0o755)  # nginx's workers (nobody, when started as root) reach the socket through it
        empty_metrics_folder(Path(self.app_env()["PROMETHEUS_MULTIPROC_DIR"]))
        self.app = self.launch_app()
        conf = self.nginx_conf()
        self.nginx = ServerProcess(
            "nginx",
            nginx_command(self.run_dir, conf),
            dict(os.environ),
            self.log_path,
            self.supervised,
            reopens_stdout=True,  # access_log /dev/stdout (deploy/nginx.conf)
        )
        self.nginx.launch()

    def nginx_conf(self, name: str = "nginx.conf") -> Path:
        """nginx's config for this unit, in front of the app server now serving, as `name` in its folder."""
        return render_nginx_conf(self.run_dir, f"unix:{self.socket_path}", self.listen, self.env, self.nginx_edit, name)

    def app_env(self) -> dict:
        return {
            # One metrics folder per unit (its app servers share it), inside the unit's folder unless
            # the environment names one.
            "PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / "metrics"),
            **APP_ENVIRONMENT,
            **self.env,
        }

    def launch_app(self) -> ServerProcess:
        """Start an app server on socket_path and wait until the socket accepts; on any failure,
        stop it (it serves no one yet) and raise."""
        command = [part.format(socket=self.socket_path) for part in self.app_command]
        # The unit's settings, as its environment has them: none reaches a request's environ
        # (plantstore_site/wsgi.py says why).
        app = ServerProcess("app", command, self.app_env(), self.log_path, self.supervised)
        app.launch()
        try:
            # Granian makes its socket at once but listens on it only once a worker has loaded the
            # app: till then nginx would be refused, and answer 503 itself.
            wait_until(
                lambda: accepts_unix_connections(self.socket_path), app.process, 60, f"{self.name}: the app's socket"
            )
            if os.geteuid() == 0:
                # The app server made it 0600, its own (root): nginx's workers (nobody) get it, no one else.
                uid, gid = pwd.getpwnam(NGINX_WORKER_USER).pw_uid, grp.getgrnam(NGINX_WORKER_GROUP).gr_gid
                os.chown(self.socket_path, uid, gid)
        except BaseException:
            app.kill()
            self.socket_path.unlink(missing_ok=True)
            raise
        return app

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until /livez through nginx answers 200: nginx and the app serve. Its dependencies
        need not answer yet: until they do, /healthz and the API answer 503 Error bodies, and the
        unit serves as soon as they are back, without a restart. RuntimeError with the log if not."""

        def ready() -> bool:
            if not self.app.running():
                raise RuntimeError(f"{self.name}: the app server exited ({self.app.process.returncode})")
            return http_status(f"{self.url}/livez", host=self.probe_host) == 200

        try:
            wait_until(ready, self.nginx.process, timeout, f"{self.name} on {self.url}")
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{self.log()}") from None

    def start(self, timeout: float = 60) -> "Unit":
        """launch() and wait_ready(); on any failure, Ctrl-C included, stop what was started."""
        try:
            self.launch()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def reload(self) -> None:
        """A graceful reload, for a new version: a new app server (the new code) on a new socket,
        then nginx's config naming it, checked (nginx -t) and re-read (SIGHUP): nginx's new worker
        sends every new request there, its old one finishes what it holds. retire() then stops the
        old app server once nothing can reach it. If the new app server does not start or answer
        /livez, or nginx refuses the config, it is stopped, nothing was switched, and RuntimeError
        says why: the running version serves on.

        Not the app server's own reload (Granian's SIGHUP: new workers on the same socket): it stops
        an old worker whether or not its replacement started, and an old worker stopping closes the
        idle connections nginx keeps to it, and nginx may have just sent a request on one; it does
        not send a POST twice, so that client would get a 503 (docs/decisions/supervisor.md)."""
        self.retire(wait=True)  # the reload before this one has finished
        old_app, old_socket = self.app, self.socket_path
        self.generation += 1
        new_app = None
        try:
            new_app = self.launch_app()
            # Django imports the URLs and views at the first request: one proves they load.
            livez = http_status(f"{self.url}/livez", timeout=30, unix_socket=self.socket_path, host=self.probe_host)
            if livez != 200:
                raise RuntimeError(f"{self.name}: the new app server answered /livez with {livez}")
            conf = self.nginx_conf("next.conf")
            check = subprocess.run(
                [*nginx_command(self.run_dir, conf), "-t", "-q"], capture_output=True, text=True, timeout=30
            )
            if check.returncode != 0:
                raise RuntimeError(f"{self.name}: nginx refuses the new config: {check.stderr.strip()}")
        except BaseException:
            if new_app:
                new_app.kill()
            self.socket_path.unlink(missing_ok=True)
            (self.run_dir / "next.conf").unlink(missing_ok=True)
            self.generation -= 1
            raise
        old_nginx_workers = set(children(self.nginx.process.pid))
        os.replace(conf, self.run_dir / "nginx.conf")
        self.app = new_app
        self.nginx.send(signal.SIGHUP)
        # nginx's old worker answers what it holds within NGINX_SHUTDOWN_S (worker_shutdown_timeout).
        self.retiring = (old_app, old_socket, old_nginx_workers, time.monotonic() + NGINX_SHUTDOWN_S + 5)

    def retire(self, wait: bool = False) -> bool:
        """Stop the app server a reload replaced, once nginx's workers that could reach it have
        exited (or their worker_shutdown_timeout has passed); with `wait`, wait for that. True when
        one was stopped. make serve calls it between its other checks."""
        if not self.retiring:
            return False
        old_app, old_socket, old_nginx_workers, deadline = self.retiring
        while old_nginx_workers & set(children(self.nginx.process.pid)) and time.monotonic() < deadline:
            if not wait:
                return False
            time.sleep(0.05)
        old_app.stop(timeout=WORKER_STOP_S + 5)  # nothing sends it requests: it stops at once
        old_socket.unlink(missing_ok=True)
        self.retiring = None
        return True

    def running(self) -> bool:
        return bool(self.app and self.nginx and self.app.running() and self.nginx.running())

    def stop(self) -> None:
        """Graceful: nginx stops accepting and finishes what it holds (SIGQUIT), then the app server
        finishes its requests (SIGTERM); the unit's folder goes."""
        if self.nginx:
            self.nginx.stop(timeout=40, sig=signal.SIGQUIT)
        for app in (self.retiring[0] if self.retiring else None, self.app):
            if app:
                app.stop(timeout=40)
        self.retiring = None
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def kill(self) -> None:
        """SIGKILL every process of the unit at once, as a host dying would; start() brings it back."""
        for server in (self.nginx, self.retiring[0] if self.retiring else None, self.app):
            if server:
                server.kill()
        self.retiring = None
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def pids(self) -> list[int]:
        """The processes whose CPU this unit's work costs (with their descendants): nginx's, the app's."""
        return [self.nginx.process.pid, self.app.process.pid]

    def worker_pids(self) -> list[int]:
        """The app server's worker processes (a resource tracker is not one)."""
        workers = []
        for pid in children(self.app.process.pid):
            try:
                if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes():
                    workers.append(pid)
            except FileNotFoundError:
                continue
        return workers

    def log(self) -> str:
        return self.app.log() if self.app else ""
