"""The HTTP edge, tried with real sockets, with the same cases in each topology the README offers:
`make serve` (a production unit: nginx in front of Granian) and `make cluster` (nginx, the same edge,
in front of HAProxy in front of such units)."""

import http.client
import io
import json
import re
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.db import connection

from plants.exceptions import ErrorCode
from tests.live import PUBLIC_HOST, TLS_PROXY_ADDRESS, MakeServe, request
from tests.topologies import (
    CLUSTER,
    SERVE,
    TLS,
    TlsProxy,
    running_cluster,
    topology_of_cluster,
    topology_of_served,
)

pytestmark = pytest.mark.live

# What the TLS proxy in front of a unit adds to a client's request (tests/live.py: PROXY_HEADERS):
# the raw requests below are sent from its address, as it sends them on.
PROXIED = b"Host: %s\r\nX-Forwarded-Proto: https\r\n" % PUBLIC_HOST.encode()


# Each topology's files live in a folder of its own, not pytest's tmp_path: pytest deletes all but
# the 3 newest of those, and other test runs on the machine may start while these servers run.
@pytest.fixture(scope="module")
def work_dir():
    folder = Path(tempfile.mkdtemp(prefix="plantstore-edge."))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="module")
def serve_topology(work_dir):
    (work_dir / "serve").mkdir()
    served = MakeServe(work_dir / "serve").start()
    try:
        yield topology_of_served(served)
    finally:
        served.stop()


@pytest.fixture(scope="module")
def cluster_topology(django_db_setup, django_db_blocker, work_dir):
    with running_cluster(connection.settings_dict, work_dir, django_db_blocker) as cluster:
        yield topology_of_cluster(cluster)


@pytest.fixture(scope="module", params=[SERVE, CLUSTER])
def topology(request):
    """Each case runs against make serve (SQLite) and make cluster (PostgreSQL through PgBouncer)."""
    return request.getfixturevalue(f"{request.param}_topology")


@pytest.fixture(scope="module")
def tls_topology(work_dir):
    """make serve behind a TLS-terminating proxy, as docs/deploying.md says: the unit believes the
    X-Forwarded-For of the proxy's one address, and no one else's."""
    (work_dir / "tls").mkdir()
    served = MakeServe(work_dir / "tls").start()
    try:
        proxy = TlsProxy(served.port).start()
    except BaseException:
        served.stop()
        raise
    try:
        yield topology_of_served(served, "tls", proxy)
    finally:
        proxy.stop()
        served.stop()


ADMIN_PASSWORD = "the-right-password-" + "y" * 12


@pytest.fixture(scope="module", params=[SERVE, CLUSTER, TLS])
def login_topology(request):
    """The three topologies, each with a superuser `admin` (each test starts with `axes_reset`)."""
    topology = request.getfixturevalue(f"{request.param}_topology")
    topology.manage(
        "createsuperuser",
        "--no-input",
        "--username",
        "admin",
        "--email",
        "admin@example.com",
        DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
    )
    return topology


def exchange(port: int, data: bytes, linger: float = 1.0) -> tuple[int, http.client.HTTPMessage, bytes, bytes]:
    """Send bytes as they are; (status, headers, body) of the first answer, and whatever else the
    server sent on that connection before closing it or going quiet for `linger` seconds."""
    received = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(TLS_PROXY_ADDRESS, 0)) as conn:
        conn.sendall(data)
        try:
            while chunk := conn.recv(65536):
                received += chunk
                conn.settimeout(linger)
        except (TimeoutError, ConnectionResetError):
            pass
    stream = _Unclosable(received)
    response = http.client.HTTPResponse(_Received(stream))
    response.begin()
    body = response.read()
    return response.status, response.headers, body, received[stream.tell() :]


class _Unclosable(io.BytesIO):
    def close(self) -> None:  # HTTPResponse closes its file once the body is read; we read on
        pass


class _Received:
    def __init__(self, stream: io.BytesIO):
        self.stream = stream

    def makefile(self, mode: str) -> io.BytesIO:
        return self.stream


def raw_request(port: int, data: bytes) -> tuple[int, http.client.HTTPMessage, bytes]:
    status, headers, body, _ = exchange(port, data, linger=0.2)
    return status, headers, body


def create(token: str, body: bytes, extra: bytes = b"") -> bytes:
    return (
        b"POST /plants HTTP/1.1\r\n"
        + PROXIED
        + b"Content-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\n".encode()
        + extra
        + f"Content-Length: {len(body)}\r\n\r\n".encode()
        + body
    )


def post(headers: bytes, body: bytes) -> bytes:
    """A create with these framing headers and body, as sent (no token: it never needs one)."""
    return b"POST /plants HTTP/1.1\r\n" + PROXIED + b"Content-Type: application/json\r\n" + headers + b"\r\n" + body


PLANT = b'{"id": 1, "name": "Fern"}'
CHUNKED_PLANT = b"%x\r\n" % len(PLANT) + PLANT + b"\r\n0\r\n\r\n"

# What the edge (nginx, in both topologies) refuses itself, and the catalog code of its Error body.
# tests/test_error_catalog.py counts these as the way its edge-only codes are reached.
EDGE_REFUSALS = [
    (
        "header-70kb",
        b"GET /healthz HTTP/1.1\r\n" + PROXIED + b"X-Big: " + b"a" * 70_000 + b"\r\n\r\n",
        ErrorCode.HEADERS_TOO_LARGE,
    ),
    (
        "header-12kb",
        b"GET /healthz HTTP/1.1\r\n" + PROXIED + b"X-Big: " + b"a" * 12_000 + b"\r\n\r\n",
        ErrorCode.HEADERS_TOO_LARGE,
    ),
    ("url-20kb", b"GET /" + b"a" * 20_000 + b" HTTP/1.1\r\n" + PROXIED + b"\r\n", ErrorCode.URI_TOO_LONG),
    ("url-12kb", b"GET /" + b"a" * 12_000 + b" HTTP/1.1\r\n" + PROXIED + b"\r\n", ErrorCode.URI_TOO_LONG),
    ("negative-length", post(b"Content-Length: -1\r\n", b""), ErrorCode.BAD_REQUEST),
    ("not-http", b"GARBAGE\r\n\r\n", ErrorCode.BAD_REQUEST),
    ("gzip-encoding", post(b"Transfer-Encoding: gzip\r\n", b""), ErrorCode.NOT_IMPLEMENTED),
    ("body-2mb", post(b"Content-Length: 2000000\r\n", b""), ErrorCode.BODY_TOO_LARGE),
    (
        "two-different-lengths",
        post(b"Content-Length: %d\r\nContent-Length: 4\r\n" % len(PLANT), PLANT),
        ErrorCode.BAD_REQUEST,
    ),
    ("nul-in-header", post(b"X-Note: a\x00b\r\nContent-Length: %d\r\n" % len(PLANT), PLANT), ErrorCode.BAD_REQUEST),
    (
        "chunked-then-x",
        post(b"Transfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n", CHUNKED_PLANT),
        ErrorCode.BAD_REQUEST,
    ),
    ("space-before-colon", post(b"Transfer-Encoding : chunked\r\n", CHUNKED_PLANT), ErrorCode.BAD_REQUEST),
    (
        "bad-chunk-size",
        post(b"Transfer-Encoding: chunked\r\n", b"zz\r\n" + PLANT + b"\r\n0\r\n\r\n"),
        ErrorCode.BAD_REQUEST,
    ),
]
EDGE_REFUSAL_IDS = [name for name, _, _ in EDGE_REFUSALS]


def assert_refused(answer: tuple, code: ErrorCode) -> None:
    """An Error body with `code`."""
    status, headers, body = answer[:3]
    assert (status, headers["Content-Type"]) == (code // 100, "application/json"), body
    error = json.loads(body)
    assert set(error) == {"error", "message"}
    assert error["error"] == code


@pytest.mark.parametrize(("name", "data", "code"), EDGE_REFUSALS, ids=EDGE_REFUSAL_IDS)
def test_server_refusal_returns_error_body_with_catalog_code(topology, name, data, code):
    answer = raw_request(topology.port, data)

    assert_refused(answer, code)


def test_refusal_the_edge_answers_itself_is_logged_once_with_the_method_sent(topology):
    def edge_lines() -> list[dict]:
        lines = (line[line.index("{") :] for line in topology.log().splitlines() if '{"edge": true' in line)
        return [entry for entry in map(json.loads, lines) if entry["status"] == 413]

    before = len(edge_lines())
    answer = raw_request(topology.port, post(b"Content-Length: 2000000\r\n", b""))
    time.sleep(0.5)

    assert_refused(answer, ErrorCode.BODY_TOO_LARGE)
    logged = edge_lines()[before:]
    assert [(entry["method"], entry["path"]) for entry in logged] == [("POST", "/plants")]


def test_http_1_0_get_with_a_body_is_answered(topology):
    status, headers, body = raw_request(
        topology.port, b"GET /healthz HTTP/1.0\r\n" + PROXIED + b"Content-Length: 3\r\n\r\nabc"
    )

    assert (status, json.loads(body)) == (200, {"status": "ok"})


def test_chunked_create_is_stored(topology):
    head = create(topology.token, b"", extra=b"Transfer-Encoding: chunked\r\n").replace(b"Content-Length: 0\r\n", b"")
    body = b'{"id": 7001, "name": "Chunked fern"}'

    status, _, answer = raw_request(topology.port, head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n")
    retry = request(f"{topology.url}/plants", {"id": 7001, "name": "Other"}, topology.token)

    assert (status, json.loads(answer)) == (200, {"id": 7001, "name": "Chunked fern"})
    assert (retry[0], json.loads(retry[2])["error"]) == (400, ErrorCode.DUPLICATE_ID)  # it was stored


def test_health_with_post_returns_405_with_allow(topology):
    status, headers, text = request(f"{topology.url}/healthz", {}, method="POST")

    assert (status, headers["Allow"]) == (405, "GET, HEAD")
    assert json.loads(text) == {"error": 40500, "message": "Method POST not allowed."}


def test_forged_newlines_and_unknown_host_leave_one_line_each_in_the_logs(topology):
    forged = '{"method": "GET", "path": "/forged", "status": 200}'
    for path in [f"/x%0a{forged}", f"/x%0d%0a{forged}", f"/x%E2%80%A8{forged}"]:
        raw_request(topology.port, f"GET {path.replace(' ', '%20')} HTTP/1.1\r\n".encode() + PROXIED + b"\r\n")
    unknown = raw_request(topology.port, b"GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n")
    time.sleep(0.5)

    lines = topology.log().splitlines()
    assert (unknown[0], json.loads(unknown[2])["error"]) == (400, 40000)
    # Each forged path is inside its own request's log lines, escaped: the app's, and the edge's of its
    # 404 (still %-encoded), one per nginx it passed; no line starts with it.
    forged_in = [line for line in lines if "forged" in line]
    app_lines = [
        line
        for line in forged_in
        if re.match(r'\d{4}-\d\d-\d\d [\d:,]+ INFO plants\.requests \{"method": "GET", "path": "/x', line)
    ]
    assert len(app_lines) == 3
    assert all(
        line.startswith('{"edge": true, "method": "GET", "path": "/x%') for line in set(forged_in) - set(app_lines)
    )
    host_lines = [line for line in lines if "evil.example" in line]
    assert len(host_lines) == 1 and " WARNING django.security.DisallowedHost " in host_lines[0]
    assert "Traceback" not in topology.log()


def smuggling(name: str, frame) -> tuple[str, bytes]:
    """A create framed by `frame(hidden)` -> (headers, body), hiding GET /smuggled-<name>."""
    headers, body = frame(b"GET /smuggled-%s HTTP/1.1\r\n%s\r\n" % (name.encode(), PROXIED))
    return name, post(headers, body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n" % len(data) + data + b"\r\n"


# Requests that two hops could frame two ways, each hiding a request where a hop that framed it the
# other way would see a request of its own.
SMUGGLING = [
    smuggling(
        "cl-te", lambda s: (b"Content-Length: %d\r\nTransfer-Encoding: chunked\r\n" % (5 + len(s)), b"0\r\n\r\n" + s)
    ),
    smuggling("te-cl", lambda s: (b"Transfer-Encoding: chunked\r\nContent-Length: 4\r\n", chunk(s) + b"0\r\n\r\n")),
    smuggling(
        "te-xchunked",
        lambda s: (b"Transfer-Encoding: xchunked\r\nContent-Length: %d\r\n" % (5 + len(s)), b"0\r\n\r\n" + s),
    ),
    smuggling("te-chunked-identity", lambda s: (b"Transfer-Encoding: chunked, identity\r\n", b"0\r\n\r\n" + s)),
    smuggling(
        "te-chunked-twice",
        lambda s: (b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", b"0\r\n\r\n" + s),
    ),
    smuggling(
        "te-space-colon",
        lambda s: (b"Transfer-Encoding : chunked\r\nContent-Length: %d\r\n" % (5 + len(s)), b"0\r\n\r\n" + s),
    ),
    smuggling(
        "te-tab", lambda s: (b"Transfer-Encoding:\tchunked\r\nContent-Length: %d\r\n" % (5 + len(s)), b"0\r\n\r\n" + s)
    ),
    smuggling("same-length-twice", lambda s: (b"Content-Length: %d\r\nContent-Length: %d\r\n" % (len(s), len(s)), s)),
    smuggling("length-list", lambda s: (b"Content-Length: %d, %d\r\n" % (len(s), len(s)), s)),
    smuggling("length-plus", lambda s: (b"Content-Length: +%d\r\n" % len(s), s)),
    smuggling("two-different-lengths", lambda s: (b"Content-Length: 0\r\nContent-Length: %d\r\n" % len(s), s)),
]


# nginx, the edge of both topologies, refuses each: 501 NOT_IMPLEMENTED for a Transfer-Encoding
# other than `chunked`, 400 for the rest.
NOT_CHUNKED = {"te-xchunked", "te-chunked-identity", "te-tab"}


@pytest.mark.parametrize(("name", "data"), SMUGGLING, ids=[name for name, _ in SMUGGLING])
def test_smuggled_request_is_refused_or_framed_alike_and_never_reaches_the_app(topology, name, data):
    status, headers, body, rest = exchange(topology.port, data)
    time.sleep(0.3)  # a request is logged just after it is answered
    after = request(f"{topology.url}/healthz")

    assert_refused((status, headers, body), ErrorCode.NOT_IMPLEMENTED if name in NOT_CHUNKED else ErrorCode.BAD_REQUEST)
    assert rest == b""  # one answer: no second request was answered on that connection
    assert f"/smuggled-{name}" not in topology.log()
    assert (after[0], after[2]) == (200, '{"status": "ok"}')


def test_slow_clients_hold_no_app_thread(topology):
    slow = []
    for _ in range(60):  # headers, one byte a second
        conn = socket.create_connection(("127.0.0.1", topology.port), source_address=(TLS_PROXY_ADDRESS, 0))
        conn.sendall(b"POST /plants HTTP/1.1\r\n" + PROXIED + b"X-Slow: ")
        slow.append(conn)
    for _ in range(20):  # whole headers, then a body one byte a second
        conn = socket.create_connection(("127.0.0.1", topology.port), source_address=(TLS_PROXY_ADDRESS, 0))
        conn.sendall(create(topology.token, b"").replace(b"Content-Length: 0\r\n", b"Content-Length: 4000\r\n") + b"{")
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
            status, _, text = request(f"{topology.url}/plants", {"id": plant_id, "name": "Prompt"}, topology.token)
            timings.append((status, round(time.monotonic() - started, 2)))
    finally:
        stop.set()
        feeder.join()
        for conn in slow:
            conn.close()
    after = request(f"{topology.url}/plants", {"id": 8100, "name": "After"}, topology.token)
    login_page = request(f"{topology.url}/admin/login/")

    assert all(status == 200 and seconds < 2 for status, seconds in timings), timings
    assert (after[0], json.loads(after[2])) == (200, {"id": 8100, "name": "After"})
    assert login_page[0] == 200 and "csrfmiddlewaretoken" in login_page[2]


# How long the edge (nginx in both) waits for a request's headers before it closes the connection.
HEADER_TIMEOUT = 15


def test_client_that_stops_sending_headers_is_dropped_without_an_answer(topology):
    timeout = HEADER_TIMEOUT
    with socket.create_connection(
        ("127.0.0.1", topology.port), timeout=timeout + 5, source_address=(TLS_PROXY_ADDRESS, 0)
    ) as conn:
        conn.sendall(b"POST /plants HTTP/1.1\r\n" + PROXIED + b"X-Stalled: ")
        started = time.monotonic()
        try:
            received = conn.recv(65536)
        except ConnectionResetError:  # nginx resets a timed-out connection (reset_timedout_connection)
            received = b""
        waited = time.monotonic() - started

    assert received == b""  # neither an HTML page nor an Error body: nothing
    assert timeout - 1 < waited < timeout + 3, waited


def cpu_ticks(pid: int) -> int:
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


# The kernel hands a new connection to a worker that is on a CPU: beside other tests' load, the
# share measures the machine, not nginx's keepalive_requests. Alone, it runs once, on PostgreSQL
# (the database does not change how the workers share connections).
@pytest.mark.alone
def test_keep_alive_load_is_shared_by_every_worker(topology):
    workers = topology.workers()
    before = {pid: cpu_ticks(pid) for pid in workers}

    def client():
        conn = topology.connection()  # one keep-alive connection
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
    assert len(workers) == {"serve": 2, "cluster": 4}[topology.name]
    # Each worker does at least half its even share.
    assert min(used.values()) >= 0.5 * sum(used.values()) / len(workers), used


def admin_login(topology, source: str, password: str, headers: dict | None = None) -> tuple:
    """Log in as `admin` as a browser does, from the loopback address `source`: the login page for
    the CSRF cookie and form token, then the form (the cookie sent by hand: it is Secure)."""
    conn = topology.connection(source)
    try:
        conn.request("GET", "/admin/login/", headers=headers or {})
        page = conn.getresponse()
        html = page.read().decode()
        cookie = re.search(r"csrftoken=([^;]+)", page.getheader("Set-Cookie")).group(1)
        form_token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html).group(1)
        form = {"username": "admin", "password": password, "csrfmiddlewaretoken": form_token, "next": "/admin/"}
        conn.request(
            "POST",
            "/admin/login/?next=/admin/",
            body=urlencode(form),
            headers={
                "Content-Type": "application/x-www-form-urlencoded",
                "Cookie": f"csrftoken={cookie}",
                "Origin": f"https://{PUBLIC_HOST}",
                "Referer": f"https://{PUBLIC_HOST}/admin/login/",
                **(headers or {}),
            },
        )
        answer = conn.getresponse()
        return answer.status, answer.headers, answer.read().decode()
    finally:
        conn.close()


LOCKED_OUT = {
    "error": 42900,
    "message": "Too many failed logins for this user from this address, or from this address; try again in 15 minutes.",
}


def assert_locked_out(answer: tuple) -> None:
    status, headers, text = answer
    assert (status, headers["Content-Type"], headers["Retry-After"], json.loads(text)) == (
        429,
        "application/json",
        "900",
        LOCKED_OUT,
    )


def test_failed_logins_lock_out_their_client_not_the_admin(login_topology):
    login_topology.manage("axes_reset")

    failures = [admin_login(login_topology, "127.0.0.2", f"guess-{n}") for n in range(7)]
    elsewhere = admin_login(login_topology, "127.0.0.3", ADMIN_PASSWORD)
    locked = admin_login(login_topology, "127.0.0.2", ADMIN_PASSWORD)

    assert [status for status, *_ in failures] == [200] * 4 + [429] * 3, failures[
        0
    ]  # the 5th failure locks (PLANTS_ADMIN_LOGIN_FAILURES)
    assert (elsewhere[0], elsewhere[1]["Location"]) == (302, "/admin/")
    assert_locked_out(locked)


SPOOFED = {"X-Forwarded-For": "127.0.0.3", "X-Real-IP": "127.0.0.3"}


def test_client_address_headers_from_a_client_are_not_believed(login_topology):
    login_topology.manage("axes_reset")

    failures = [admin_login(login_topology, "127.0.0.2", f"guess-{n}", SPOOFED)[0] for n in range(5)]
    still_locked = [admin_login(login_topology, "127.0.0.2", ADMIN_PASSWORD, headers) for headers in [SPOOFED, {}]]
    real = admin_login(login_topology, "127.0.0.3", ADMIN_PASSWORD)

    assert failures == [200] * 4 + [429]  # counted against 127.0.0.2, whatever it claimed
    for answer in still_locked:
        assert_locked_out(answer)
    assert (real[0], real[1]["Location"]) == (302, "/admin/")


# A proxy between the clients and the TLS proxy that nobody listed in PLANTS_TRUSTED_PROXIES (a
# corporate proxy, a NAT): nginx takes its address as every client's behind it, where the
# failed-authentication limit counts them all together.
UNTRUSTED_PROXY = "203.0.113.9"
FAILURE_LIMIT = 60  # .env.example's PLANTS_ANONYMOUS_THROTTLE_RATE, a minute


def test_a_client_past_the_failure_limit_never_shuts_out_another_clients_new_token(topology):
    def create(client: str, plant_id: int, token: str) -> int:
        body, forwarded = {"id": plant_id, "name": "Limit"}, f"{client}, {UNTRUSTED_PROXY}"
        return request(f"{topology.url}/plants", body, token=token, X_Forwarded_For=forwarded)[0]

    bad = [create("198.51.100.1", 900_000 + n, "plnt_revoked-or-mistyped") for n in range(FAILURE_LIMIT + 40)]
    # Issued once the address is over its limit: no worker of any server has seen it yet.
    token = topology.manage("token", "issue", "behind-the-same-proxy")
    served, more_bad = [], []
    for n in range(30):
        served.append(create("198.51.100.2", 910_000 + n, token))
        more_bad += [create("198.51.100.1", 920_000 + n + half, "plnt_revoked-or-mistyped") for half in (0, 50)]

    assert bad[:FAILURE_LIMIT] == [401] * FAILURE_LIMIT and set(bad + more_bad) == {401, 429}
    assert served == [200] * 30


def test_the_app_server_nginx_sends_to_is_named_to_this_host_alone(serve_topology):
    """GET /_edge/upstream, deploy/plantstore-release's question: a client on this host gets the socket
    nginx sends to, from nginx itself; a client elsewhere (behind the trusted proxy) the 403 Error body."""

    def upstream_for(client: str) -> tuple:
        connection = serve_topology.connection(client)
        try:
            connection.request("GET", "/_edge/upstream")
            response = connection.getresponse()
            answer = response.status, response.getheader("X-Upstream"), json.loads(response.read())
            return *answer, response.getheader("X-Request-ID")
        finally:
            connection.close()

    here, elsewhere = upstream_for("127.0.0.1"), upstream_for("203.0.113.7")

    assert (here[0], here[2]) == (200, {"upstream": here[1]})
    assert re.fullmatch(r"unix:/\S+/app\.\d+\.sock", here[1]), here
    assert (elsewhere[0], elsewhere[1], elsewhere[2]["error"]) == (403, None, 40300)
    # Like every answer, each names its request id (nginx's own, as no X-Request-ID was sent).
    assert [bool(re.fullmatch("[0-9a-f]{32}", answer[3] or "")) for answer in (here, elsewhere)] == [True, True]
