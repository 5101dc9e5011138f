"""`make serve`, the production path: migrate, collectstatic, one production unit (nginx in front of
the app server), debug off; and what its signals do: reload without a failed request, stop leaving
nothing behind."""

import http.client
import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.processes import ROOT, children, wait_until
from localcluster.cluster import Redis
from localcluster.processes import free_port
from tests.live import (
    DEPLOYED_SETTINGS,
    LIVE_SETTINGS,
    PUBLIC_HOST,
    TLS_PROXY_ADDRESS,
    Load,
    MakeServe,
    ProxiedConnection,
    live_unit,
    request,
    wait_for_exit,
)

# make serve on a SQLite file of its own (tests/live.py: MakeServe), or on no reachable database.
pytestmark = [pytest.mark.live, pytest.mark.own_database]


@pytest.fixture
def served(tmp_path):
    server = MakeServe(tmp_path).start()
    yield server
    server.stop()


def unit_folder(server: MakeServe) -> Path:
    """The unit's temp folder, named in nginx's command line (-p)."""
    cmdline = Path(f"/proc/{server.pid_of(b'nginx: master')}/cmdline").read_bytes().decode()
    return Path(cmdline.split("-p ")[1].split(" ")[0])


def test_make_serve_migrates_collects_static_and_serves_through_nginx_with_one_log_line_each(served):
    health = request(f"{served.url}/healthz")
    admin_css = request(f"{served.url}/static/admin/css/base.css")
    unknown = request(f"{served.url}/no-such-page")

    assert (health[0], health[2], health[1]["Server"]) == (200, '{"status": "ok"}', "nginx")
    assert (admin_css[0], admin_css[1]["Content-Type"].split(";")[0]) == (200, "text/css")
    assert (unknown[0], unknown[1]["Content-Type"]) == (404, "application/json")
    time.sleep(0.5)
    output = served.log()
    assert "manage.py migrate" in output
    assert output.count("/no-such-page") == 1  # the app's request log line; Granian's is off


def test_trace_is_refused_by_nginx_with_an_error_body_and_the_allowed_methods(served):
    answers = [request(f"{served.url}{path}", method="TRACE") for path in ("/plants", "/healthz")]

    assert [
        (status, headers["Allow"], headers["Content-Type"], json.loads(text)) for status, headers, text in answers
    ] == [
        (405, allowed, "application/json", {"error": 40500, "message": "Method TRACE not allowed."})
        for allowed in ("POST, OPTIONS", "GET, HEAD")
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


STORE_DOWN = '{"error": 50300, "message": "The rate-limit store does not answer."}'
CANNOT_COUNT = {"error": 50300, "message": "The service cannot reach its rate-limit store; retry later."}


def test_a_rate_limit_store_down_at_start_does_not_stop_it_and_it_serves_once_the_store_is_back(tmp_path):
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
    assert (health[0], health[2]) == (503, STORE_DOWN)
    assert (create[0], json.loads(create[2])) == (503, CANNOT_COUNT)
    assert (after[0], json.loads(after[2])) == (200, {"id": 2, "name": "Fern"})
    assert "serve: a server exited" not in server.log()  # served by the processes it started with
    assert server.stored_ids() == {2}


def release(folder: Path, version: str, wsgi_prelude: str = "") -> Path:
    """A release's folder as a deploy makes it: the code, and a venv (here the run's own, linked);
    `wsgi_prelude` put first in its WSGI module (a release that fails to start)."""
    shutil.copytree(ROOT, folder, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.sqlite3", "static*"))
    (folder / ".venv").symlink_to(Path(sys.executable).parent.parent)
    settings = folder / "plantstore_site" / "settings.py"
    settings.write_text(settings.read_text().replace('"VERSION": "1.0.0"', f'"VERSION": "{version}"'))
    wsgi = folder / "plantstore_site" / "wsgi.py"
    wsgi.write_text(wsgi_prelude + wsgi.read_text())
    return folder


class LinkedReleases:
    """/opt/plantstore as docs/deploying.md's releases make it, in `work_dir`: `current`, a link to
    the release that runs, started as the systemd unit's ExecStart runs it, by the link's path, with
    a runtime directory; switch() points the link elsewhere at once, as `mv -T` does."""

    def __init__(self, work_dir: Path):
        self.work_dir, self.current = work_dir, work_dir / "current"
        self.current.symlink_to(release(work_dir / "releases" / "1", "1.0.0"))
        (work_dir / "run").mkdir()
        port = free_port()
        self.url, self.log = f"http://127.0.0.1:{port}", work_dir / "serve.log"
        self.env = {
            **os.environ,
            **LIVE_SETTINGS,
            "DATABASE_URL": f"sqlite:///{work_dir / 'db.sqlite3'}",
            "DJANGO_STATIC_ROOT": str(work_dir / "static"),
            "PLANTS_LISTEN": f"127.0.0.1:{port}",
            "RUNTIME_DIRECTORY": str(work_dir / "run"),
        }
        self.python = str(self.current / ".venv" / "bin" / "python")
        for step in (["migrate", "--no-input"], ["collectstatic", "--no-input", "-v", "0"]):
            self.manage(*step)
        self.token = self.manage("token", "issue", "releases").strip()
        with self.log.open("wb") as output:
            self.serve = subprocess.Popen(
                [self.python, "-m", "deploy.serve"],
                cwd=self.current,
                env={**self.env, "PWD": str(self.current)},  # the unit's WorkingDirectory= and Environment=PWD=
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        wait_until(lambda: "serve: nginx on" in self.log.read_text(), self.serve, 60, "its ready line")

    def manage(self, *args: str) -> str:
        done = subprocess.run([self.python, "manage.py", *args], cwd=self.current, env=self.env, capture_output=True)
        return done.check_returncode() or done.stdout.decode()

    def switch(self, folder: Path) -> None:
        (self.work_dir / "next").symlink_to(folder)
        os.replace(self.work_dir / "next", self.current)

    def exec_reload(self) -> subprocess.CompletedProcess:
        """The unit's ExecReload= (deploy/plantstore.service), its paths the link's, as systemd runs it."""
        [command] = [
            line
            for line in (ROOT / "deploy" / "plantstore.service").read_text().splitlines()
            if line.startswith("ExecReload=")
        ]
        command = command.removeprefix("ExecReload=").replace("/opt/plantstore", str(self.current))
        command = command.replace("$MAINPID", str(self.serve.pid))
        return subprocess.run(
            command.split(), cwd=self.current, env=self.env, capture_output=True, text=True, timeout=120
        )

    def version(self) -> str:
        return json.loads(request(f"{self.url}/openapi.json")[2])["info"]["version"]

    def stop(self) -> None:
        os.killpg(self.serve.pid, signal.SIGTERM)
        self.serve.wait(timeout=60)


def test_a_reload_after_the_release_link_is_switched_serves_the_new_release_under_load(tmp_path):
    releases = LinkedReleases(tmp_path)
    try:
        before = releases.version()
        with Load(f"{releases.url}/plants", releases.token, clients=4, limit=5_000, timeout=30) as load:
            load.wait_for(50)
            releases.switch(release(tmp_path / "releases" / "2", "2.0.0"))
            reloaded = releases.exec_reload()
            answered_after = len(load.answers)
            load.wait_for(answered_after + 100, timeout=60)
        after = releases.version()
    finally:
        releases.stop()

    assert (before, after) == ("1.0.0", "2.0.0")
    assert (reloaded.returncode, reloaded.stderr) == (0, "reload: reloaded: the new version serves\n")
    assert len(load.answers) >= answered_after + 100
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []


def test_a_reload_whose_release_cannot_start_fails_with_the_reason_and_the_running_one_serves_on(tmp_path):
    releases = LinkedReleases(tmp_path)
    broken = release(tmp_path / "releases" / "2", "2.0.0", 'raise RuntimeError("this release cannot start")\n')
    try:
        with Load(f"{releases.url}/plants", releases.token, clients=2, limit=5_000, timeout=30) as load:
            load.wait_for(20)
            releases.switch(broken)
            refused = releases.exec_reload()
            answered_after = len(load.answers)
            load.wait_for(answered_after + 50, timeout=60)
        version = releases.version()
    finally:
        releases.stop()

    assert refused.returncode == 1
    assert refused.stderr.startswith("reload: failed, the running version serves on: ")
    assert "the reload failed, the running version serves on" in releases.log.read_text()  # make serve's line
    assert version == "1.0.0"
    assert len(load.answers) >= answered_after + 50
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []


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
    nginx_worker = next(
        pid for pid in served.descendants() if b"nginx: worker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    )
    uid, gid = (
        int(line.split()[1])
        for line in Path(f"/proc/{nginx_worker}/status").read_text().splitlines()
        if line.startswith(("Uid:", "Gid:"))
    )
    socket = unit_folder(served) / "app.0.sock"

    # (As root nginx's workers are nobody; the app server, root, made the socket: the unit gives it to them.)
    assert (socket.stat().st_mode & 0o777, socket.stat().st_uid, socket.stat().st_gid) == (0o600, uid, gid)


def test_sighup_reloads_with_a_new_app_server_under_load_without_a_failed_request(served):
    token = served.token()
    old_app = {served.pid_of(b"bin/granian"), *served.app_workers()}

    # Requests go on to the old app server while the new one boots (seconds, on a busy machine).
    with Load(f"{served.url}/plants", token, clients=4, limit=10_000, timeout=30) as load:
        load.wait_for(100)
        os.kill(served.pid_of(b"deploy.serve"), signal.SIGHUP)
        wait_until(lambda: "serve: reloaded" in served.log(), served.process, 60, "the reload")
        wait_until(lambda: "old app server has stopped" in served.log(), served.process, 60, "the old app server")
        # Only the new app server is left: nginx sends it everything.
        answered_after = len(load.answers)
        load.wait_for(answered_after + 300, timeout=60)

    assert len(load.answers) >= answered_after + 300
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert load.ids_with(200) <= served.stored_ids()
    new_app = {served.pid_of(b"bin/granian"), *served.app_workers()}  # its main process and 2 workers
    # A new app server, which imported the app anew, on a new socket; the old one has stopped.
    assert (len(new_app), new_app & old_app, wait_for_exit(list(old_app), timeout=5)) == (3, set(), [])
    assert sorted(path.name for path in unit_folder(served).glob("*.sock")) == ["app.1.sock"]


def test_a_request_begun_before_a_reload_is_answered_after_it_by_the_old_app_server(served):
    token = served.token()
    old_app = served.pid_of(b"bin/granian")
    body = json.dumps({"id": 7, "name": "Sent slowly, across the reload"}).encode()
    # Sent as the TLS proxy sends it on.
    connection = socket.create_connection(("127.0.0.1", served.port), timeout=30, source_address=(TLS_PROXY_ADDRESS, 0))
    connection.sendall(
        f"POST /plants HTTP/1.1\r\nHost: {PUBLIC_HOST}\r\nX-Forwarded-Proto: https\r\n".encode()
        + b"Content-Type: application/json\r\n"
        + f"Authorization: Bearer {token}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    )
    sent = 0

    # The body comes a byte at a time (within nginx's body timeout) while the unit reloads: nginx's
    # old worker holds the request, and passes it on only once it is whole, to the old app server.
    os.kill(served.pid_of(b"deploy.serve"), signal.SIGHUP)
    while "serve: reloaded" not in served.log() and sent < len(body) - 1:
        connection.sendall(body[sent : sent + 1])
        sent += 1
        time.sleep(0.5)
    alive_after_reload = Path(f"/proc/{old_app}").exists() and "serve: reloaded" in served.log()
    connection.sendall(body[sent:])
    answer = b""
    while b'"}' not in answer and (chunk := connection.recv(65536)):
        answer += chunk
    connection.close()
    wait_until(lambda: "old app server has stopped" in served.log(), served.process, 60, "the old app server")
    status, _, text = request(f"{served.url}/plants", {"id": 8, "name": "After the reload"}, token)

    assert alive_after_reload
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n")
    assert answer.endswith(b'\r\n\r\n{"id":7,"name":"Sent slowly, across the reload"}')
    assert (status, text) == (200, '{"id":8,"name":"After the reload"}')
    assert {7, 8} <= served.stored_ids()


def test_a_reload_nginx_refuses_the_config_of_leaves_the_running_version_serving(tmp_path):
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    unit = live_unit(tmp_path, DATABASE_URL=unreachable).start()
    try:
        app, nginx = unit.app.process.pid, unit.nginx.process.pid
        nginx_workers = children(nginx)
        rendered = unit.nginx_conf

        def refused_conf(name: str = "nginx.conf") -> Path:  # the next version's config, with a typo
            conf = rendered(name)
            conf.write_text(
                conf.read_text().replace("worker_processes 1;", "worker_processes 1;\nno_such_directive on;")
            )
            return conf

        unit.nginx_conf = refused_conf
        with pytest.raises(RuntimeError, match="nginx refuses the new config: .*no_such_directive"):
            unit.reload()
        liveness = request(f"{unit.url}/livez")
        state = (unit.app.process.pid, children(nginx), sorted(path.name for path in unit.run_dir.glob("*.sock")))
        app_servers = [
            pid for pid in children(os.getpid()) if b"bin/granian" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
    finally:
        unit.stop()

    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    assert state == (app, nginx_workers, ["app.0.sock"])
    assert app_servers == [app]  # the new one was stopped


def test_a_reload_whose_new_version_fails_to_start_leaves_the_running_one_serving(tmp_path):
    # The settings module is the version's code: valid at the start, broken by the "deploy" below.
    code = tmp_path / "code"
    code.mkdir()
    (code / "version_settings.py").write_text("from plantstore_site.settings import *  # noqa: F403\n")
    served = MakeServe(tmp_path, PYTHONPATH=str(code), DJANGO_SETTINGS_MODULE="version_settings").start()
    try:
        token = served.token()
        app = {served.pid_of(b"bin/granian"), *served.app_workers()}
        (code / "version_settings.py").write_text('raise ImportError("the new version is broken")\n')
        shutil.rmtree(code / "__pycache__", ignore_errors=True)

        os.kill(served.pid_of(b"deploy.serve"), signal.SIGHUP)
        wait_until(lambda: "serve: the reload failed" in served.log(), served.process, 90, "the failed reload")
        created = request(f"{served.url}/plants", {"id": 1, "name": "Fern"}, token)
        still_serving = {served.pid_of(b"bin/granian"), *served.app_workers()}
        sockets = sorted(path.name for path in unit_folder(served).glob("*.sock"))
        serving = served.process.poll() is None
    finally:
        served.stop()

    assert (created[0], created[2]) == (200, '{"id":1,"name":"Fern"}')
    assert (serving, still_serving, sockets) == (True, app, ["app.0.sock"])
    assert "the new version is broken" in served.log()


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT"])
def test_sigterm_or_ctrl_c_stops_gracefully_and_leaves_nothing_running(tmp_path, how):
    server = MakeServe(tmp_path).start()
    processes, folder = server.descendants(), unit_folder(server)

    os.kill(server.pid_of(b"deploy.serve"), getattr(signal, how))

    assert server.process.wait(timeout=60) == 0
    assert wait_for_exit(processes) == []
    assert not folder.exists()
    assert "serve: stopping gracefully" in server.log()


def test_a_closed_terminal_stops_make_serve_and_leaves_nothing_running(tmp_path):
    terminal, seat = pty.openpty()
    server = MakeServe(tmp_path, terminal=seat).start()
    os.close(seat)
    processes, folder = server.descendants(), unit_folder(server)

    os.close(terminal)  # the terminal window closes: the kernel sends SIGHUP to its foreground

    server.process.wait(timeout=60)
    assert wait_for_exit(processes) == [], server.log()
    assert not folder.exists()


def test_a_killed_supervisor_takes_its_servers_with_it(tmp_path):
    server = MakeServe(tmp_path).start()
    supervisor = server.pid_of(b"deploy.serve")
    servers, folder = [pid for pid in server.descendants() if pid != supervisor], unit_folder(server)

    os.kill(supervisor, signal.SIGKILL)

    assert wait_for_exit(servers) == []
    server.stop()
    shutil.rmtree(folder)  # a killed supervisor cannot remove the unit's folder: the test does


def test_request_in_flight_at_sigterm_is_answered(served):
    token = served.token()
    with Load(f"{served.url}/plants", token, clients=4, limit=2000, timeout=30) as load:
        load.wait_for(100)
        os.kill(served.pid_of(b"deploy.serve"), signal.SIGTERM)
        served.process.wait(timeout=60)

    # Every request either got its answer or found no server listening; none was cut off.
    cut_off = [(status, text) for _, status, _, text, _ in load.answers if status not in (200, None)]
    assert cut_off == []
    assert load.ids_with(200) <= served.stored_ids()
    assert json.loads(load.answers[0][3])["id"] == load.answers[0][0]
