"""nginx's upstream keep-alive (deploy/nginx.conf, deploy/unit.py: render_nginx_conf) against an upstream
that closes idle connections: nginx's idle timeout must be below the upstream's, or a POST lands on a
connection the upstream is closing and the client loses it (nginx does not resend a POST it has
sent). Real nginx, rendered as the cluster's front renders it, in front of a stub upstream whose idle
close leaves a wide, deterministic window for that race (a real server's is microseconds); then the
rule for each upstream nginx keeps connections to: HAProxy behind the front, Granian in each unit."""

import json
import os
import re
import select
import shutil
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from deploy import unit as deploy_unit
from deploy.app_server import granian_command
from deploy.processes import ROOT, wait_until
from deploy.unit import UPSTREAM_IDLE_S, nginx_command, render_nginx_conf
from localcluster.cluster import HAProxy
from localcluster.processes import ServerProcess, accepts_connections, free_port
from tests.live import PUBLIC_HOST, request

# How long the stub holds a connection it has decided to close without reading it; it closes at
# once when a request lands in that window (unread: the kernel answers the close with a reset).
LINGER_S = 0.5
# No stub outlives this, whatever a test does.
STUB_LIFETIME_S = 20


@dataclass
class Connection:
    """One connection the stub accepted: the bodies it answered, who ended it, after how long idle."""

    bodies: list[bytes] = field(default_factory=list)
    ended_by: str | None = None  # "nginx" (it closed an idle connection) or "upstream"
    idle_s: float | None = None
    request_unread: bool = False  # the upstream closed with a request in its receive buffer
    ended: threading.Event = field(default_factory=threading.Event)


def readable(conn: socket.socket, timeout: float) -> bool:
    return bool(select.select([conn], [], [], timeout)[0])


def take_message(buffer: bytes) -> tuple[bytes | None, bytes]:
    """(the body of the first whole HTTP message, request or answer, in `buffer`, what follows it);
    (None, buffer) while incomplete."""
    head, found, rest = buffer.partition(b"\r\n\r\n")
    if not found:
        return None, buffer
    length = re.search(rb"(?im)^content-length:\s*(\d+)\s*$", head)
    size = int(length.group(1)) if length else 0
    if len(rest) < size:
        return None, buffer
    return rest[:size], rest[size:]


class IdleClosingUpstream:
    """An HTTP/1.1 server on 127.0.0.1 that answers each request 200 with its JSON body echoed and
    keeps the connection open. Once a connection has been idle `idle_s` after an answer, it decides
    to close it, as HAProxy's `timeout http-keep-alive` does: it stops reading, lingers (LINGER_S),
    then closes. Stops by itself after STUB_LIFETIME_S."""

    def __init__(self, idle_s: float):
        self.idle_s = idle_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.1)
        self.port = self.listener.getsockname()[1]
        self.connections: list[Connection] = []
        self.closing = threading.Event()  # set when it decides to close an idle connection
        self.stopped = threading.Event()
        self.deadline = time.monotonic() + STUB_LIFETIME_S
        self.thread = threading.Thread(target=self.accept, daemon=True)

    def start(self) -> "IdleClosingUpstream":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=5)

    def serving(self) -> bool:
        return not self.stopped.is_set() and time.monotonic() < self.deadline

    def accept(self) -> None:
        with self.listener:
            while self.serving():
                try:
                    conn, _ = self.listener.accept()
                except TimeoutError:
                    continue
                record = Connection()
                self.connections.append(record)
                threading.Thread(target=self.serve, args=(conn, record), daemon=True).start()

    def serve(self, conn: socket.socket, record: Connection) -> None:
        conn.settimeout(5)  # for the rest of a request already begun
        buffer, idle_since = b"", time.monotonic()
        try:
            while self.serving():
                if not buffer and not readable(conn, self.idle_s):
                    record.ended_by, record.idle_s = "upstream", time.monotonic() - idle_since
                    self.closing.set()
                    record.request_unread = readable(conn, LINGER_S)
                    return
                chunk = conn.recv(65536)
                if not chunk:
                    record.ended_by, record.idle_s = "nginx", time.monotonic() - idle_since
                    return
                buffer += chunk
                body, buffer = take_message(buffer)
                while body is not None:
                    record.bodies.append(body)
                    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                    conn.sendall(head.encode() + body)
                    idle_since = time.monotonic()
                    body, buffer = take_message(buffer)
        finally:
            conn.close()
            record.ended.set()

    def bodies(self) -> list[list[dict]]:
        """The JSON bodies the stub answered, one list per connection."""
        return [[json.loads(body) for body in record.bodies] for record in self.connections]


@pytest.fixture
def nginx_in_front(monkeypatch):
    """`url, upstream = nginx_in_front(upstream_idle_s, nginx_idle_s)`: an IdleClosingUpstream and
    nginx in front of it, configured as the cluster's front (render_nginx_conf)
    but for its upstream idle timeout; nginx's own folder, stopped by its pid."""
    started = []

    def start(upstream_idle_s: float, nginx_idle_s: int = UPSTREAM_IDLE_S) -> tuple[str, IdleClosingUpstream]:
        upstream = IdleClosingUpstream(upstream_idle_s).start()
        run_dir = Path(tempfile.mkdtemp(prefix="plantstore-keepalive."))
        run_dir.chmod(0o755)  # nginx's workers (nobody, when started as root) use its temp folders
        port = free_port()
        listen, upstream_address = f"127.0.0.1:{port}", f"127.0.0.1:{upstream.port}"
        monkeypatch.setattr(deploy_unit, "UPSTREAM_IDLE_S", nginx_idle_s)
        conf = render_nginx_conf(run_dir, upstream_address, listen, {})
        nginx = ServerProcess("nginx", nginx_command(run_dir, conf), dict(os.environ), run_dir / "nginx.log")
        started.append((upstream, nginx, run_dir))
        nginx.launch()
        # Ready once it accepts: a request would open a connection to the stub and be counted.
        wait_until(lambda: accepts_connections(port), nginx.process, 10, "nginx")
        return f"http://127.0.0.1:{port}", upstream

    yield start
    for upstream, nginx, run_dir in started:
        nginx.stop(timeout=10)
        upstream.stop()
        shutil.rmtree(run_dir, ignore_errors=True)


def post_plant(url: str, plant_id: int) -> tuple[int | None, dict]:
    status, _, text = request(f"{url}/plants", {"id": plant_id, "name": "Monstera"}, timeout=5)
    return status, json.loads(text) if text else {}


@pytest.mark.live
def test_post_on_a_connection_the_upstream_is_closing_gets_503_and_never_reaches_it(nginx_in_front):
    # The control that shows the race is real: nginx's idle timeout (production's) above the upstream's.
    url, upstream = nginx_in_front(upstream_idle_s=1)

    first = post_plant(url, 1)
    assert upstream.closing.wait(timeout=5), "the stub never decided to close its idle connection"
    second = post_plant(url, 2)

    assert first == (200, {"id": 1, "name": "Monstera"})
    # nginx's 502 (the upstream reset the connection after the request was sent; a POST is not
    # resent), answered as deploy/nginx.conf's error page for 502 503 504.
    assert second == (503, {"error": 50300, "message": "The service is not answering; retry later."})
    assert upstream.bodies() == [[{"id": 1, "name": "Monstera"}]]
    assert (upstream.connections[0].ended_by, upstream.connections[0].request_unread) == ("upstream", True)


@pytest.mark.live
def test_post_after_nginx_idle_timeout_opens_a_new_connection_the_upstream_answers(nginx_in_front):
    url, upstream = nginx_in_front(upstream_idle_s=2, nginx_idle_s=1)

    first = post_plant(url, 1)
    assert upstream.connections[0].ended.wait(timeout=5), "nobody closed the idle connection"
    second = post_plant(url, 2)

    assert (first[0], second[0]) == (200, 200)
    idle = upstream.connections[0]
    assert idle.ended_by == "nginx" and 0.9 < idle.idle_s < upstream.idle_s, idle
    assert upstream.bodies() == [[{"id": 1, "name": "Monstera"}], [{"id": 2, "name": "Monstera"}]]
    assert not upstream.closing.is_set()


@pytest.mark.live
def test_post_within_nginx_idle_timeout_reuses_the_upstream_connection(nginx_in_front):
    url, upstream = nginx_in_front(upstream_idle_s=2, nginx_idle_s=1)

    first = post_plant(url, 1)
    time.sleep(0.5)
    second = post_plant(url, 2)

    assert (first[0], second[0]) == (200, 200)
    assert upstream.bodies() == [[{"id": 1, "name": "Monstera"}, {"id": 2, "name": "Monstera"}]]


HAPROXY_TIME_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600, "d": 86400}


def haproxy_keep_alive_s(config: str) -> float:
    """HAProxy's idle timeout on a client's connection between requests, from its `defaults`:
    `timeout http-keep-alive`, else `timeout http-request`, else `timeout client` (HAProxy's rule)."""
    timeouts = dict(re.findall(r"(?m)^\s*timeout\s+(\S+)\s+(\S+)", config))
    value = timeouts.get("http-keep-alive") or timeouts.get("http-request") or timeouts["client"]
    number, unit = re.fullmatch(r"(\d+)(us|ms|s|m|h|d)?", value).groups()
    return int(number) * HAPROXY_TIME_UNITS[unit or "ms"]  # HAProxy's default unit is the millisecond


def nginx_upstream_idle_s(tmp_path: Path) -> int:
    """The upstream keepalive_timeout the cluster's front renders (localcluster/cluster.py: Front)."""
    conf = render_nginx_conf(tmp_path, "127.0.0.1:1", "127.0.0.1:2", {}, read_timeout_s=40)
    return int(re.search(r"(?s)upstream app \{[^}]*keepalive_timeout (\d+)s;", conf.read_text()).group(1))


def test_haproxy_keeps_an_idle_connection_from_the_front_open_longer_than_the_front_does(tmp_path):
    haproxy = HAProxy(
        free_port(), [], tmp_path, "plants.example.com"
    )  # renders localcluster/config/haproxy.cfg; starts nothing
    template = (ROOT / "localcluster" / "config" / "haproxy.cfg").read_text()

    assert re.search(r"(?m)^\s*timeout http-keep-alive ", template), "set it explicitly, above the front's"
    assert nginx_upstream_idle_s(tmp_path) < haproxy_keep_alive_s(haproxy.config.read_text())


def unit_nginx_conf(tmp_path: Path) -> str:
    """The nginx config every production unit renders (deploy/unit.py: Unit), in front of its socket."""
    return render_nginx_conf(tmp_path, "unix:/run/app.sock", "127.0.0.1:2", {}).read_text()


def granian_option(name: str) -> int:
    """An option's value in the command every unit runs Granian with (deploy/app_server.py)."""
    return int(next(part.split("=", 1)[1] for part in granian_command({}) if part.startswith(f"--{name}=")))


def test_granian_keeps_an_idle_connection_from_the_unit_s_nginx_open_longer_than_nginx_does(tmp_path):
    conf = unit_nginx_conf(tmp_path)
    nginx_idle_s = int(re.search(r"(?s)upstream app \{[^}]*keepalive_timeout (\d+)s;", conf).group(1))

    # Granian closes a kept-alive connection that has waited this long for its next request's headers.
    assert nginx_idle_s < granian_option("http1-header-read-timeout") / 1000


def test_each_granian_worker_takes_more_connections_than_nginx_keeps_idle(tmp_path):
    conf = unit_nginx_conf(tmp_path)
    idle_per_nginx_worker = int(re.search(r"(?s)upstream app \{[^}]*keepalive (\d+);", conf).group(1))
    nginx_workers = int(re.search(r"(?m)^worker_processes (\d+);", conf).group(1))

    # An idle kept-alive connection holds one of a worker's --backpressure places, and every idle
    # connection nginx keeps may be on one worker: it must still take new connections.
    assert granian_option("backpressure") > idle_per_nginx_worker * nginx_workers


def read_answer(conn: socket.socket) -> tuple[bytes, bytes]:
    """One HTTP answer from `conn`, however its bytes arrive: (status line, body); (b"<closed>", …) if it closes."""
    buffer = b""
    while (body := take_message(buffer)[0]) is None:
        chunk = conn.recv(65536)
        if not chunk:
            return b"<closed>", buffer
        buffer += chunk
    return buffer.partition(b"\r\n")[0], body


def test_unit_s_app_server_answers_on_a_connection_left_idle_longer_than_nginx_s_idle_timeout(production_unit):
    server = production_unit()
    answers = []
    with socket.socket(socket.AF_UNIX) as conn:  # as nginx connects to the app server
        conn.settimeout(10)
        conn.connect(str(server.socket_path))
        for pause in (UPSTREAM_IDLE_S + 1, 0):
            conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: %s\r\n\r\n" % PUBLIC_HOST.encode())
            answers.append(read_answer(conn))
            time.sleep(pause)

    assert answers == [(b"HTTP/1.1 200 OK", b'{"status": "ok"}')] * 2
