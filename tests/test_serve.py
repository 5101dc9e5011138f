"""`make serve`, the production path: migrate, collectstatic, one production unit (nginx in front of
the app server), debug off; who may reach what; a dependency down at its start. Its reloads:
tests/test_reload.py; its stops: tests/test_stop.py."""

import gzip
import http.client
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from deploy.processes import ROOT, wait_until
from localcluster.cluster import Redis
from localcluster.processes import command_line
from tests.live import (
    DEPLOYED_SETTINGS,
    PROXY_HEADERS,
    PUBLIC_HOST,
    TLS_PROXY_ADDRESS,
    Load,
    MakeServe,
    ProxiedConnection,
    opener,
    request,
    start_make,
)

# make serve on a SQLite file of its own (tests/live.py: MakeServe), or on no reachable database.
pytestmark = [pytest.mark.live, pytest.mark.own_database]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """One `make serve` for this module's tests that only read from it (conftest.py's is one per test)."""
    server = MakeServe(tmp_path_factory.mktemp("served")).start()
    yield server
    server.stop()


def static_file(url: str, accept_encoding: str = "identity") -> tuple[int, str | None, str, bytes]:
    """(status, Content-Encoding, Content-Type, body as sent) of a static file, for a browser that
    accepts `accept_encoding`."""
    headers = {**PROXY_HEADERS, "Accept-Encoding": accept_encoding}
    with opener(TLS_PROXY_ADDRESS).open(urllib.request.Request(url, headers=headers), timeout=10) as response:
        answer = response.headers
        return response.status, answer["Content-Encoding"], answer["Content-Type"], response.read()


def test_make_serve_migrates_collects_static_gzipped_but_source_maps_and_serves_through_nginx_with_one_log_line_each(
    served,
):
    health = request(f"{served.url}/healthz")
    css, gzipped_css = (
        static_file(f"{served.url}/static/admin/css/base.css", accept) for accept in ("identity", "gzip")
    )
    source_map = static_file(
        f"{served.url}/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js.map", "gzip"
    )
    unknown = request(f"{served.url}/no-such-page")

    assert (health[0], health[2], health[1]["Server"]) == (200, '{"status": "ok"}', "nginx")
    assert (css[0], css[2].split(";")[0]) == (200, "text/css")
    assert (css[1], gzipped_css[:2], gzip.decompress(gzipped_css[3]) == css[3]) == (None, (200, "gzip"), True)
    assert (source_map[:2], json.loads(source_map[3])["version"]) == ((200, None), 3)
    assert (unknown[0], unknown[1]["Content-Type"]) == (404, "application/json")
    time.sleep(0.5)
    output = served.log()
    assert "manage.py migrate" in output
    # The app's request line and, for a refusal, the edge's, of one request id; Granian's log is off.
    logged = [line for line in output.splitlines() if "/no-such-page" in line]
    assert [(" plants.requests " in line, '{"edge": true' in line) for line in logged] == [(True, False), (False, True)]
    assert all(f'"request_id": "{unknown[1]["X-Request-ID"]}"' in line for line in logged)


def test_trace_is_refused_by_nginx_with_an_error_body_and_the_allowed_methods(served):
    answers = [request(f"{served.url}{path}", method="TRACE") for path in ("/plants", "/healthz")]

    assert [
        (status, headers["Allow"], headers["Content-Type"], json.loads(text)) for status, headers, text in answers
    ] == [
        (405, allowed, "application/json", {"error": 40500, "message": "Method TRACE not allowed."})
        for allowed in ("POST", "GET, HEAD")
    ]


def test_with_env_example_s_settings_it_is_ready_serves_the_tls_proxy_s_requests_and_reloads(tmp_path):
    # .env.example as an operator deploys it: only the secrets, the database, the listener and the
    # trusted proxy replaced (DEPLOYED_SETTINGS and MakeServe's own); its rate limit, its workers.
    server = MakeServe(tmp_path, **DEPLOYED_SETTINGS).start()
    try:
        token = server.token()
        created = request(f"{server.url}/plants", {"id": 1, "name": "Monstera"}, token)
        other_host = request(f"{server.url}/plants", {"id": 2, "name": "Fern"}, token, Host="127.0.0.1")
        # A client that reaches nginx itself, not through the TLS proxy, claiming HTTPS.
        direct = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10, source_address=("127.0.0.2", 0))
        direct.request("GET", "/openapi.json", headers={"Host": PUBLIC_HOST, "X-Forwarded-Proto": "https"})
        redirected = direct.getresponse()
        direct.close()
        with Load(f"{server.url}/plants", token, clients=2, limit=200, first_id=100) as load:
            load.wait_for(20)
            os.kill(server.pid_of(b"deploy.serve"), signal.SIGHUP)
            wait_until(lambda: "serve: reloaded" in server.log(), server.process, 60, "the reload")
            load.wait_for(200)
    finally:
        server.stop()

    assert "serve: nginx on" in server.log()  # its ready line
    assert (created[0], json.loads(created[2])) == (200, {"id": 1, "name": "Monstera"})
    assert (other_host[0], json.loads(other_host[2])) == (400, {"error": 40000, "message": "Bad request."})
    assert (redirected.status, redirected.getheader("Location")) == (301, f"https://{PUBLIC_HOST}/openapi.json")
    assert [status for _, status, *_ in load.answers] == [200] * 200
    assert server.stored_ids() == {1, *range(100, 300)}


def test_the_unit_s_own_settings_given_only_in_django_env_file_reach_its_listener_probes_and_nginx(tmp_path):
    # The listener, the host the probes name and the proxy nginx believes, in the file alone.
    server = MakeServe(tmp_path)
    in_the_file = ("PLANTS_LISTEN", "PORT", "DJANGO_ALLOWED_HOSTS", "PLANTS_TRUSTED_PROXIES", "DJANGO_SECRET_KEY")
    env_file = tmp_path / "plantstore.env"
    env_file.write_text("".join(f"{name}={server.env.pop(name)}\n" for name in in_the_file))
    server.env["DJANGO_ENV_FILE"] = str(env_file)
    server.start()
    try:
        # Through the TLS proxy: believed only if nginx trusts it, else redirected to HTTPS (301).
        created = request(f"{server.url}/plants", {"id": 1, "name": "Monstera"}, server.token())
        # The image's HEALTHCHECK, run with the same environment.
        probe = subprocess.run([sys.executable, "-m", "deploy.probe", "/livez"], cwd=ROOT, env=server.env)
    finally:
        server.stop()

    assert "serve: nginx on" in server.log()  # ready: its probe named the file's host
    assert probe.returncode == 0
    assert (created[0], json.loads(created[2])) == (200, {"id": 1, "name": "Monstera"})
    assert server.stored_ids() == {1}


@pytest.mark.parametrize(
    ("setting", "refused_because"),
    [
        ({"PLANTS_DATABASE_TIMEOUT_S": "20"}, "PLANTS_DATABASE_TIMEOUT_S is 20: a request could take 34 s,"),
        (
            {"PLANTS_ACCESS_LOG": "/var/log/plants-$host.log"},
            "PLANTS_ACCESS_LOG: '/var/log/plants-$host.log' holds '$'",
        ),
        ({"PLANTS_LISTEN": "plants.example.com"}, "PLANTS_LISTEN: nginx would listen on 'plants.example.com', which"),
    ],
    ids=["database-bound-past-nginx-s-wait", "access-log-nginx-cannot-take", "listen-address-without-a-port"],
)
def test_a_start_with_a_setting_it_cannot_serve_with_is_refused_naming_it_before_any_server_starts(
    tmp_path, setting, refused_because
):
    server = MakeServe(tmp_path, **setting)
    with pytest.raises(RuntimeError, match="make serve did not come up"):
        server.start()

    assert server.process.returncode == 2  # make's, for the recipe's exit 1
    assert f"\nserve: {refused_because}" in server.log()
    assert "Starting granian" not in server.log()


def test_a_start_on_a_port_another_server_holds_fails_without_a_ready_line(tmp_path):
    server = MakeServe(tmp_path)

    class AnswersEverything(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # /livez and the rest: 200, as another unit or a stray server would
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    holder = http.server.HTTPServer(("127.0.0.1", server.port), AnswersEverything)
    threading.Thread(target=holder.serve_forever, daemon=True).start()
    try:
        status = start_make("serve", server.env, server.log_path).wait(timeout=90)
    finally:
        holder.shutdown()
        holder.server_close()

    assert status == 2  # make's, for the recipe's exit 1
    assert f"serve: nginx on {server.url}, the app server on" not in server.log()  # no ready line
    assert f"bind() to 127.0.0.1:{server.port} failed (98: Address already in use)" in server.log()
    assert f"serve: nginx on {server.url}: the process exited (1)\n" in server.log()
    assert "serve: serve:" not in server.log()


def test_a_rate_limit_store_down_at_start_does_not_stop_it_and_it_serves_uncounted_till_the_store_is_back(tmp_path):
    redis = Redis()  # its port chosen, not started: down when make serve starts
    server = MakeServe(tmp_path, REDIS_URL=redis.url, PLANTS_THROTTLE_RATE="600/minute").start()
    try:
        token = server.token()
        health, create = (
            request(f"{server.url}/healthz"),
            request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token),
        )
        redis.start()
        wait_until(lambda: request(f"{server.url}/healthz")[0] == 200, server.process, 15, "/healthz with Redis back")
        after = request(f"{server.url}/plants", {"id": 2, "name": "Fern"}, token)
    finally:
        server.stop()
        redis.stop()

    assert "serve: nginx on" in server.log()  # its ready line, with the store down
    # .env.example's PLANTS_RATE_LIMIT_FAILURE_MODE, open: served uncounted, ready without Redis.
    assert (health[0], health[2]) == (200, '{"status": "ok"}')
    assert (create[0], json.loads(create[2]), create[1]["RateLimit"]) == (200, {"id": 1, "name": "Rose"}, None)
    assert (after[0], json.loads(after[2]), after[1]["RateLimit"][:16]) == (
        200,
        {"id": 2, "name": "Fern"},
        '"default";r=599;',
    )
    assert "rate-limit store unavailable: ConnectionError (the limits fail open: served uncounted)" in server.log()
    assert "serve: a server exited" not in server.log()  # served by the processes it started with
    assert server.stored_ids() == {1, 2}


def test_the_admin_and_the_metrics_are_served_only_to_the_clients_listed_for_each(tmp_path):
    metrics_token = "serve-test-metrics-token-" + "z" * 16
    server = MakeServe(
        tmp_path,
        PLANTS_ADMIN_CLIENTS="127.0.0.3",
        PLANTS_METRICS_CLIENTS="127.0.0.4/32",
        PLANTS_METRICS_TOKEN=metrics_token,
    ).start()
    token = server.token()
    scrape = {"Authorization": f"Bearer {metrics_token}"}
    try:
        answers = {}
        for client in ("127.0.0.2", "127.0.0.3", "127.0.0.4"):  # each through the TLS proxy, which names it
            connection = ProxiedConnection(server.port, client=client)
            for path, headers in (("/admin/login/", {}), ("/metrics", scrape)):
                connection.request("GET", path, headers=headers)
                response = connection.getresponse()
                body = response.read().decode()
                answers[client, path] = (response.status, body if response.status == 403 else "")
            connection.close()
        create = request(f"{server.url}/plants", {"id": 1, "name": "Rose"}, token, X_Forwarded_For="127.0.0.2")
    finally:
        server.stop()

    refused = (403, '{"error": 40300, "message": "This path is not served to your address."}')
    assert answers == {
        ("127.0.0.2", "/admin/login/"): refused,
        ("127.0.0.2", "/metrics"): refused,
        ("127.0.0.3", "/admin/login/"): (200, ""),
        ("127.0.0.3", "/metrics"): refused,
        ("127.0.0.4", "/admin/login/"): refused,
        ("127.0.0.4", "/metrics"): (200, ""),
    }
    assert create[0] == 200  # the API is every client's


def test_only_nginx_s_workers_may_open_the_app_server_s_socket(served):
    nginx_worker = next(pid for pid in served.descendants() if b"nginx: worker" in command_line(pid))
    uid, gid = (
        int(line.split()[1])
        for line in Path(f"/proc/{nginx_worker}/status").read_text().splitlines()
        if line.startswith(("Uid:", "Gid:"))
    )
    socket = served.unit_folder() / "app.0.sock"

    # (As root nginx's workers are nobody; the app server, root, made the socket: the unit gives it to them.)
    assert (socket.stat().st_mode & 0o777, socket.stat().st_uid, socket.stat().st_gid) == (0o600, uid, gid)
