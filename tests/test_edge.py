"""The HTTP edge as `make serve` runs it (nginx in front of the app server), tried with real sockets."""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from deploy.processes import ROOT, free_port
from plants.exceptions import ErrorCode
from tests.live import request, wait_until_healthy

pytestmark = pytest.mark.live
VENV = Path(sys.executable).parent.parent


class Served:
    """`make serve` on a throwaway SQLite database, in its own process group."""

    def __init__(self, tmp: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "serve.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "APP_", "PLANTS_"))},
            "DATABASE_URL": f"sqlite:///{tmp / 'db.sqlite3'}",
            "DJANGO_SECRET_KEY": "edge-test-secret-key-" + "x" * 40,
            "DJANGO_STATIC_ROOT": str(tmp / "static"),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
            "PLANTS_THROTTLE_RATE": "",
            "PORT": str(self.port),
            "APP_PROCESSES": "2",
            **env,
        }

    def start(self) -> "Served":
        # -o: the venv is already set up; make must not try to reinstall it.
        self.process = subprocess.Popen(
            ["make", f"VENV={VENV}", "-o", f"{VENV}/.runtime", "serve"],
            cwd=ROOT,
            env=self.env,
            stdout=self.log_path.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        if not wait_until_healthy(self.url, self.process, timeout=90):
            self.stop()
            raise RuntimeError(f"make serve did not come up:\n{self.log()}")
        return self

    def token(self) -> str:
        return subprocess.run(
            [sys.executable, "manage.py", "token", "issue", "edge-client"],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    def app_server_workers(self) -> list[int]:
        """The pids of app server's workers: the children of the app server among make's descendants."""

        def children(pid: int) -> list[int]:
            path = Path(f"/proc/{pid}/task/{pid}/children")
            return [int(child) for child in path.read_text().split()] if path.exists() else []

        pending, descendants = [self.process.pid], []
        while pending:
            pid = pending.pop(0)
            descendants.append(pid)
            pending.extend(children(pid))
        master = next(pid for pid in descendants if b"bin/uwsgi" in Path(f"/proc/{pid}/cmdline").read_bytes())
        return children(master)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        os.killpg(self.process.pid, signal.SIGTERM)
        self.process.wait(timeout=40)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    server = Served(tmp_path_factory.mktemp("edge")).start()
    server.api_token = server.token()
    yield server
    server.stop()


def raw_request(port: int, data: bytes, timeout: float = 5) -> tuple[int, dict, bytes]:
    """Send bytes as they are; (status, headers, body) of the answer."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as conn:
        conn.sendall(data)
        response = http.client.HTTPResponse(conn)
        response.begin()
        return response.status, dict(response.getheaders()), response.read()


def create(port: int, token: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\n".encode()
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


# What nginx refuses itself, and the catalog code its Error body carries (tests/test_error_catalog.py
# counts these as the way its edge-only codes are reached).
EDGE_REFUSALS = [
    (
        "header-70kb",
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        ErrorCode.HEADERS_TOO_LARGE,
    ),
    ("url-20kb", b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", ErrorCode.URI_TOO_LONG),
    (
        "negative-length",
        b"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n",
        ErrorCode.BAD_REQUEST,
    ),
    ("not-http", b"GARBAGE\r\n\r\n", ErrorCode.BAD_REQUEST),
    (
        "gzip-encoding",
        b"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: gzip\r\n\r\n",
        ErrorCode.NOT_IMPLEMENTED,
    ),
    (
        "body-2mb",
        b"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2000000\r\n\r\n",
        ErrorCode.BODY_TOO_LARGE,
    ),
]


@pytest.mark.parametrize(("name", "data", "code"), EDGE_REFUSALS, ids=[name for name, _, _ in EDGE_REFUSALS])
def test_server_refusal_returns_error_body_with_catalog_code(served, name, data, code):
    status, headers, body = raw_request(served.port, data)

    assert (status, headers["Content-Type"]) == (code // 100, "application/json")
    error = json.loads(body)
    assert set(error) == {"error", "message"}
    assert error["error"] == code


def test_chunked_body_is_read_through_nginx(served):
    body = b'{"id": 7001, "name": "Chunked fern"}'
    chunked = f"{len(body):x}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    head = create(served.port, served.api_token, b"", extra=b"Transfer-Encoding: chunked\r\n")
    head = head.replace(b"Content-Length: 0\r\n", b"")

    status, _, answer = raw_request(served.port, head + chunked)
    retry = request(f"{served.url}/plants", {"id": 7001, "name": "Other"}, served.api_token)

    assert (status, json.loads(answer)) == (200, {"id": 7001, "name": "Chunked fern"})
    assert (retry[0], json.loads(retry[2])["error"]) == (400, 40003)  # it was stored


def test_health_with_post_returns_405_with_allow(served):
    status, headers, text = request(f"{served.url}/healthz", {}, method="POST")

    assert (status, headers["Allow"]) == (405, "GET, HEAD")
    assert json.loads(text) == {"error": 40500, "message": "Method POST not allowed."}


def test_forged_newlines_and_unknown_host_leave_one_line_each_in_the_logs(served):
    forged = '{"method": "GET", "path": "/forged", "status": 200}'
    for path in [f"/x%0a{forged}", f"/x%0d%0a{forged}", f"/x%E2%80%A8{forged}"]:
        raw_request(served.port, f"GET {path.replace(' ', '%20')} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    unknown = raw_request(served.port, b"GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    time.sleep(0.5)

    lines = served.log().splitlines()
    assert (unknown[0], json.loads(unknown[2])["error"]) == (400, 40000)
    # Each forged path is inside its own request's log line, escaped; no line starts with it.
    forged_in = [line for line in lines if "forged" in line]
    assert len(forged_in) == 3
    assert all(
        re.match(r'\d{4}-\d\d-\d\d [\d:,]+ INFO plants\.requests \{"method": "GET", "path": "/x', line)
        for line in forged_in
    )
    host_lines = [line for line in lines if "evil.example" in line]
    assert len(host_lines) == 1 and " WARNING django.security.DisallowedHost " in host_lines[0]
    assert "Traceback" not in served.log()


def test_slow_clients_do_not_delay_well_behaved_creates(served):
    slow = []
    for _ in range(60):  # headers, one byte at a time
        conn = socket.create_connection(("127.0.0.1", served.port))
        conn.sendall(b"POST /plants HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        slow.append(conn)
    for _ in range(20):  # whole headers, then a body one byte at a time
        conn = socket.create_connection(("127.0.0.1", served.port))
        conn.sendall(create(served.port, served.api_token, b"")[:-4] + b"\r\nContent-Length: 4000\r\n\r\n{")
        slow.append(conn)
    stop = threading.Event()

    def trickle():
        while not stop.wait(1):
            for conn in slow:
                conn.sendall(b"a")

    feeder = threading.Thread(target=trickle)
    feeder.start()
    try:
        time.sleep(1.5)
        timings = []
        for plant_id in range(8001, 8013):
            started = time.monotonic()
            status, _, text = request(f"{served.url}/plants", {"id": plant_id, "name": "Prompt"}, served.api_token)
            timings.append((status, round(time.monotonic() - started, 2)))
    finally:
        stop.set()
        feeder.join()
        for conn in slow:
            conn.close()

    assert all(status == 200 and seconds < 2 for status, seconds in timings), timings


def cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_keep_alive_load_is_shared_by_every_worker(served):
    workers = served.app_server_workers()
    before = {pid: cpu_ticks(pid) for pid in workers}

    def client():
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)  # one keep-alive connection
        for _ in range(150):
            conn.request("GET", "/healthz")
            assert conn.getresponse().read() == b'{"status": "ok"}'
        conn.close()

    threads = [threading.Thread(target=client) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    used = {pid: cpu_ticks(pid) - before[pid] for pid in workers}
    assert len(workers) == 2
    assert min(used.values()) >= 0.25 * sum(used.values()), used
