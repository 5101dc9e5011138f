"""The production unit: nginx on the public address in front of the app server on a unix socket.

Defined once, here: `make serve` and the image run one (deploy/serve.py); make cluster, the tests and
the bench start theirs through this class. The systemd install runs the same nginx config
(render_nginx_conf, deploy/edge.py) and app server command (deploy/app_server.py) as units of their own.
"""

import grp
import ipaddress
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

from deploy.app_server import APP_ENVIRONMENT, NGINX_READ_TIMEOUT_S, granian_command
from deploy.probe import probe_host
from deploy.processes import (
    ROOT,
    ServerProcess,
    accepts_unix_connections,
    children,
    http_answer,
    http_status,
    render,
    stop_all,
    wait_until,
)

# Who nginx's workers run as when it is started as root: they alone (and root) may open the app's socket.
NGINX_WORKER_USER, NGINX_WORKER_GROUP = "nobody", "nogroup"
# nginx's idle timeout on its upstream connections: below every upstream's own (Granian's 30 s,
# HAProxy's 10 s), so nginx never sends a POST on a connection the upstream is closing
# (tests/test_upstream_keepalive.py).
UPSTREAM_IDLE_S = 4
NGINX_SHUTDOWN_S = 35  # a stopping nginx worker's time to finish: above NGINX_READ_TIMEOUT_S, under STOP_S
STOP_S = 40  # Unit.stop's wait for nginx: with the app servers' below, under systemd's 90 s
# An app server no request can reach any more (nginx, its only client, has stopped or moved on) has
# this long to exit after SIGTERM, then its process group is killed: idle, Granian exits in well under
# a second, but a worker still loading the app would keep it WORKER_STOP_S, its in-flight grace.
IDLE_APP_STOP_S = 5
# A reload's steps, each bounded: a new app server's socket accepts (its workers loaded the app), it
# answers /livez, nginx accepts the config naming it (nginx -t), nginx's new workers have started.
APP_START_S, APP_PROBE_S, NGINX_CHECK_S, NGINX_SWITCH_S = 60, 20, 15, 10


def listen_address(env) -> str:
    """Where the unit's nginx listens: PLANTS_LISTEN, else 127.0.0.1:$PORT (8000); RuntimeError if no port ends it."""
    listen = env.get("PLANTS_LISTEN") or f"127.0.0.1:{env.get('PORT') or '8000'}"
    port = listen.rpartition(":")[2]
    if not (port.isdecimal() and port.isascii() and 0 < int(port) < 65536):
        name = "PLANTS_LISTEN" if env.get("PLANTS_LISTEN") else "PORT"
        raise RuntimeError(
            f"{name}: nginx would listen on {listen!r}, which does not end in a port (host:port, 0.0.0.0:8000)"
        )
    return listen


def local_url(listen: str) -> str:
    """The URL on this host of nginx listening on `listen`: a wildcard address is reached on loopback."""
    host, _, port = listen.rpartition(":")
    host = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "*": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
    return f"http://{host}:{port}"


def networks(env: dict, name: str) -> list[str]:
    """The setting `name` of `env` (comma-separated addresses, networks or host names) checked, one
    per item; a host name is looked up now, at each start and reload (compose names its front so)."""
    found = []
    for item in filter(None, (part.strip() for part in env.get(name, "").split(","))):
        try:
            found.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            found += host_addresses(name, item)
    return found


def nginx_word(name: str, value: str) -> str:
    """`value` as one word of nginx's config, written as is: none of the characters that end a word or
    quote one, nor `$`, which nginx reads as a variable in a log's path and in a header's or a body's text."""
    if special := sorted(set(value) & set(" \t\r\n;{}'\"\\$")):
        raise RuntimeError(
            f"{name}: {value!r} holds {''.join(special)!r}, which nginx's config would not read as written"
        )
    return value


def host_addresses(name: str, host: str) -> list[str]:
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)}
    except (OSError, UnicodeError):
        raise RuntimeError(f"{name}: {host!r} is not an address, a network or a host name that resolves") from None
    return sorted(str(ipaddress.ip_network(address)) for address in addresses)


def listen_addresses(listen: str) -> list[str]:
    """The addresses nginx listens on other than loopback, when PLANTS_LISTEN names one address or a
    host name (nginx listens on each address it resolves to), not every address: a client on this
    host reaching nginx there comes from that address."""
    host = listen.rpartition(":")[0].strip("[]")
    if host in ("", "*"):
        return []
    try:
        found = [ipaddress.ip_address(host)]
    except ValueError:
        found = [ipaddress.ip_network(network).network_address for network in host_addresses("PLANTS_LISTEN", host)]
    return [str(address) for address in found if not (address.is_unspecified or address.is_loopback)]


def client_rule(clients: list[str]) -> str:
    """nginx's rules for a location served only to `clients`; none when the list is empty (all)."""
    return "".join(f" allow {client};" for client in clients) + (" deny all;" if clients else "")


def render_nginx_conf(run_dir, upstream, listen, env, name="nginx.conf", read_timeout_s=NGINX_READ_TIMEOUT_S):
    """deploy/nginx.conf as `name` in `run_dir`: nginx on `listen` in front of `upstream`, with the settings
    of `env` it reads (PLANTS_TRUSTED_PROXIES, PLANTS_ADMIN_CLIENTS, PLANTS_METRICS_CLIENTS, PLANTS_ACCESS_LOG)."""
    proxies = networks(env, "PLANTS_TRUSTED_PROXIES")
    return render(
        ROOT / "deploy" / "nginx.conf",
        run_dir / name,
        # As root, nginx's workers drop to nobody; otherwise they run as whoever started it.
        USER=f"user {NGINX_WORKER_USER} {NGINX_WORKER_GROUP};" if os.geteuid() == 0 else "",
        LISTEN=listen,
        RUN_DIR=nginx_word("the unit's folder", str(run_dir)),
        UPSTREAM=nginx_word("the app server's address", upstream),
        UPSTREAM_IDLE=f"{UPSTREAM_IDLE_S}s",
        READ_TIMEOUT=f"{read_timeout_s}s",
        WORKER_SHUTDOWN=f"{NGINX_SHUTDOWN_S}s",
        REAL_IP="".join(f" set_real_ip_from {proxy};" for proxy in proxies),
        TRUSTED_PROXIES="".join(f" {proxy} 1;" for proxy in proxies),
        LISTEN_ADDRESSES="".join(f" {address} 1;" for address in listen_addresses(listen)),
        ADMIN_CLIENTS=client_rule(networks(env, "PLANTS_ADMIN_CLIENTS")),
        METRICS_CLIENTS=client_rule(networks(env, "PLANTS_METRICS_CLIENTS")),
        ACCESS_LOG=nginx_word("PLANTS_ACCESS_LOG", env.get("PLANTS_ACCESS_LOG") or "/dev/stdout"),
    )


def nginx_command(run_dir: Path, conf: Path) -> list[str]:
    # -e: its errors to stderr from the start, before the config names it (not Debian's compiled-in file).
    return [
        shutil.which("nginx") or "/usr/sbin/nginx",
        "-e",
        "stderr",
        "-p",
        str(run_dir),
        "-c",
        str(conf),
        "-g",
        "daemon off;",
    ]


def check_nginx_conf(run_dir: Path, conf: Path, name: str) -> None:
    """`nginx -t` on `conf`: RuntimeError naming what nginx refuses in it, or that it did not finish."""
    try:
        check = subprocess.run(
            [*nginx_command(run_dir, conf), "-t", "-q"], capture_output=True, text=True, timeout=NGINX_CHECK_S
        )
    except subprocess.TimeoutExpired:  # a host name in it that it cannot look up, say
        raise RuntimeError(f"{name}: nginx did not finish checking the new config within {NGINX_CHECK_S} s") from None
    if check.returncode != 0:
        raise RuntimeError(f"{name}: nginx refuses the new config: {check.stderr.strip()}")


def switch_nginx(run_dir: Path, next_conf: Path, master: int, name: str, process=None) -> set[int]:
    """nginx's one switch, for every path that switches it (Unit.reload, deploy/edge.py's reload): `next_conf`
    checked (nginx -t), made run_dir's nginx.conf, nginx's master (pid `master`; its Popen `process`, if
    this process started it) signalled (SIGHUP), and its new workers waited for: it starts them only once
    it has read the new config whole. Refused, or not seen within NGINX_SWITCH_S: the running config is
    put back (nginx told again if it was told) and RuntimeError says why. Returns nginx's old workers."""
    conf, switched = run_dir / "nginx.conf", lambda: bool(set(children(master)) - old_workers)
    running, old_workers = conf.read_text(), set(children(master))
    try:
        check_nginx_conf(run_dir, next_conf, name)
        os.replace(next_conf, conf)
        os.kill(master, signal.SIGHUP)
        try:
            wait_until(switched, process, NGINX_SWITCH_S, f"{name}: nginx's new workers")
        except RuntimeError:
            raise RuntimeError(
                f"{name}: nginx did not take the new config within {NGINX_SWITCH_S} s (its error log says why);"
                " its workers serve the running version"
            ) from None
    except BaseException:
        next_conf.unlink(missing_ok=True)
        if conf.read_text() != running:  # nginx may yet read it: the running version's, again
            conf.write_text(running)
            os.kill(master, signal.SIGHUP)
        raise
    return old_workers


class Unit:
    """nginx on `listen` (host:port) in front of the app server (`app_command`: Granian as
    deploy/app_server.py runs it; `{socket}` names its socket) in the unit's own temp folder.
    `env` is the app server's environment; output goes to `log`, else this process's."""

    def __init__(self, listen: str, env: dict, log=None, supervised=False, name="unit"):
        self.listen, self.env, self.log_path, self.supervised, self.name = listen, env, log, supervised, name
        self.app_command = granian_command(env)
        self.probe_host = probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))  # one the app allows (deploy/probe.py)
        self.port = int(listen.rpartition(":")[2])
        self.url = local_url(listen)
        self.run_dir: Path | None = None
        self.generation = 0  # one more at each reload, whose app server gets a new socket
        self.app: ServerProcess | None = None
        self.nginx: ServerProcess | None = None
        # What each reload replaced, until retire(): (app server, socket, nginx's old workers, deadline).
        self.retiring: list[tuple] = []

    @property
    def socket_path(self) -> Path:
        return self.run_dir / f"app.{self.generation}.sock"

    def launch(self) -> None:
        """Start the app server, then nginx once the app's socket accepts; do not wait for /livez."""
        self.run_dir = Path(tempfile.mkdtemp(prefix=f"plantstore-{self.name}."))
        self.run_dir.chmod(0o755)  # nginx's workers (nobody, when started as root) reach the socket through it
        # One metrics folder per unit, emptied, or a restarted server would go on from its last counts.
        self.app_env = {"PROMETHEUS_MULTIPROC_DIR": str(self.run_dir / "metrics"), **APP_ENVIRONMENT, **self.env}
        metrics = Path(self.app_env["PROMETHEUS_MULTIPROC_DIR"])
        metrics.mkdir(parents=True, exist_ok=True)
        for stale in metrics.glob("*.db"):
            stale.unlink()
        conf = self.nginx_conf()  # first: a setting nginx cannot take is refused before the app loads
        self.app = self.launch_app()
        command = nginx_command(self.run_dir, conf)
        self.nginx = ServerProcess("nginx", command, dict(os.environ), self.log_path, self.supervised)
        self.nginx.launch()

    def nginx_conf(self, name: str = "nginx.conf") -> Path:
        return render_nginx_conf(self.run_dir, f"unix:{self.socket_path}", self.listen, self.env, name)

    def launch_app(self) -> ServerProcess:
        """Start an app server on socket_path, wait until it accepts; on failure, stop it and raise."""
        command = [part.format(socket=self.socket_path) for part in self.app_command]
        # The unit's settings: none reaches a request's environ (plantstore_site/wsgi.py says why).
        app = ServerProcess("app", command, self.app_env, self.log_path, self.supervised)
        app.launch()
        try:
            # Granian listens only once a worker has loaded the app: till then nginx would answer 503.
            ready = lambda: accepts_unix_connections(self.socket_path)  # noqa: E731
            wait_until(ready, app.process, APP_START_S, f"{self.name}: socket")
            if os.geteuid() == 0:  # Granian made it 0600, root's: nginx's workers get it, no one else
                uid, gid = pwd.getpwnam(NGINX_WORKER_USER).pw_uid, grp.getgrnam(NGINX_WORKER_GROUP).gr_gid
                os.chown(self.socket_path, uid, gid)
        except BaseException:
            app.kill()
            self.socket_path.unlink(missing_ok=True)
            raise
        return app

    def wait_ready(self, timeout: float = 60) -> None:
        """Wait until the app server answers /livez on its socket (its URLs and views load at the first
        request) and this unit's nginx answers /livez (another server on the port is not taken for it).
        The database and Redis need not answer yet: till they do, /healthz and the API answer 503 Error
        bodies, then it serves without a restart."""

        def ready() -> bool:
            if not self.app.running():
                raise RuntimeError(f"{self.name}: the app server exited ({self.app.process.returncode})")
            app = http_status(f"{self.url}/livez", unix_socket=self.socket_path, host=self.probe_host)
            # This nginx, not another server that holds the port (this one then exits, unable to bind).
            ours = http_answer(f"{self.url}/_edge/upstream", host=self.probe_host)[1].get("X-Upstream")
            return (
                app == 200
                and ours == f"unix:{self.socket_path}"
                and http_status(f"{self.url}/livez", host=self.probe_host) == 200
            )

        wait_until(ready, self.nginx.process, timeout, f"{self.name}: nginx on {self.url}")

    def start(self, timeout: float = 60) -> "Unit":
        """launch() and wait_ready(); on any failure, Ctrl-C included, stop what was started."""
        try:
            self.launch()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def reload(self, env: dict | None = None) -> None:
        """A new version, with the settings of `env` if given: a new app server (the new code, the new
        settings) on a new socket; once it answers /livez and
        nginx accepts a config naming it (nginx -t), nginx re-reads it (SIGHUP), and once nginx's new
        workers have started, every new request goes there, nginx's old workers finish what they hold,
        and retire() stops the old app server. Else the new one is stopped, nginx keeps (or is given
        back) the running version's config, and RuntimeError says why: nothing is retired.

        Not Granian's own reload: it stops an old worker whether or not its replacement started, and
        closes the idle connections nginx keeps to it, on which nginx may have just sent a POST that
        it will not send again (docs/decisions/supervisor.md)."""
        old_app, old_socket = self.app, self.socket_path
        serving_settings = self.settings()
        self.generation += 1
        new_app = None
        try:
            if env is not None:
                self.configure(env)
            next_conf = self.nginx_conf("next.conf")  # first: a setting nginx cannot take is refused at once
            new_app = self.launch_app()
            # Django imports the URLs and views at the first request: one proves they load.
            livez = http_status(
                f"{self.url}/livez", timeout=APP_PROBE_S, unix_socket=self.socket_path, host=self.probe_host
            )
            if livez != 200:
                raise RuntimeError(f"{self.name}: the new app server answered /livez with {livez}")
            old_nginx_workers = switch_nginx(
                self.run_dir, next_conf, self.nginx.process.pid, self.name, self.nginx.process
            )
        except BaseException:
            if new_app:
                new_app.kill()
            self.socket_path.unlink(missing_ok=True)
            (self.run_dir / "next.conf").unlink(missing_ok=True)
            self.env, self.app_env, self.app_command, self.probe_host = serving_settings
            self.generation -= 1
            raise
        self.app = new_app
        self.retiring.append((old_app, old_socket, old_nginx_workers, time.monotonic() + NGINX_SHUTDOWN_S + 5))

    def settings(self) -> tuple:
        return self.env, self.app_env, self.app_command, self.probe_host

    def configure(self, env: dict) -> None:
        """Take the settings of `env` for the next app server and nginx config; all but the listener,
        which nginx's master holds: a change to it is refused (it takes a restart)."""
        if (listen := listen_address(env)) != self.listen:
            raise RuntimeError(f"{self.name}: PLANTS_LISTEN changed ({self.listen} to {listen}): it takes a restart")
        if self.app_command == granian_command(self.env):  # not another app server (the bench's peers)
            self.app_command = granian_command(env)
        self.env = env
        self.app_env = {**APP_ENVIRONMENT, **env, "PROMETHEUS_MULTIPROC_DIR": self.app_env["PROMETHEUS_MULTIPROC_DIR"]}
        self.probe_host = probe_host(env.get("DJANGO_ALLOWED_HOSTS", ""))

    def retire(self) -> bool:
        """Stop each app server a reload replaced once nginx's workers that could reach it have exited
        (or their worker_shutdown_timeout has passed). True when one was stopped."""
        if not self.retiring:
            return False
        workers = set(children(self.nginx.process.pid))
        done = [item for item in self.retiring if not item[2] & workers or time.monotonic() >= item[3]]
        stop_all([app for app, *_ in done], timeout=IDLE_APP_STOP_S)  # nginx no longer sends to them
        for item in done:
            item[1].unlink(missing_ok=True)
            self.retiring.remove(item)
        return bool(done)

    def running(self) -> bool:
        return bool(self.app and self.nginx and self.app.running() and self.nginx.running())

    def stop(self) -> None:
        """Graceful: nginx finishes what it holds (SIGQUIT), its requests to the app servers included;
        then the app servers, idle, stop: within STOP_S + IDLE_APP_STOP_S."""
        if self.nginx:
            self.nginx.stop(timeout=STOP_S, sig=signal.SIGQUIT)
        stop_all([app for app, *_ in self.retiring] + ([self.app] if self.app else []), timeout=IDLE_APP_STOP_S)
        self.retiring = []
        if self.run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)
