"""`make serve`'s reloads (SIGHUP, systemctl reload): a new app server with the new code, nothing
refused, and a release that does not come up leaves the running one serving, with the reason."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.processes import ROOT, children, wait_until
from localcluster.processes import command_line, descendants, free_port
from tests.live import (
    LIVE_SETTINGS,
    PUBLIC_HOST,
    TLS_PROXY_ADDRESS,
    Load,
    MakeServe,
    live_unit,
    request,
    wait_for_app_workers,
    wait_for_exit,
)

# make serve on a SQLite file of its own (tests/live.py: MakeServe), or on no reachable database.
pytestmark = [pytest.mark.live, pytest.mark.own_database]


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
    a runtime directory; switch() points the link elsewhere at once, as `mv -T` does. (The unit
    itself, under systemd, reloads such releases in tests/test_systemd_host.py.)"""

    def __init__(self, work_dir: Path, wsgi_prelude: str = "", wait: bool = True):
        self.work_dir, self.current = work_dir, work_dir / "current"
        self.current.symlink_to(release(work_dir / "releases" / "1", "1.0.0", wsgi_prelude))
        port = free_port()
        self.url, self.log = f"http://127.0.0.1:{port}", work_dir / "serve.log"
        self.env = {
            **os.environ,
            **LIVE_SETTINGS,
            "DATABASE_URL": f"sqlite:///{work_dir / 'db.sqlite3'}",
            "DJANGO_STATIC_ROOT": str(work_dir / "static"),
            "PLANTS_LISTEN": f"127.0.0.1:{port}",
        }
        # No migrate, collectstatic or token: what runs here is the start and reload of the unit alone.
        self.python = str(self.current / ".venv" / "bin" / "python")
        with self.log.open("wb") as output:
            self.serve = subprocess.Popen(
                [self.python, "-m", "deploy.serve"],
                cwd=self.current,
                env={**self.env, "PWD": str(self.current)},  # as a shell in the link's folder sets it
                stdout=output,
                stderr=output,
                start_new_session=True,
            )
        if wait:  # until every worker serves
            wait_until(lambda: "serve: nginx on" in self.log.read_text(), self.serve, 60, "its ready line")
            wait_for_app_workers(self.log.read_text, self.serve)

    def switch(self, folder: Path) -> None:
        (self.work_dir / "next").symlink_to(folder)
        os.replace(self.work_dir / "next", self.current)

    def terminate(self) -> tuple[int, float, list[int]]:
        """SIGTERM to the supervisor alone, as systemd sends it: its exit status, the seconds it took to
        exit, and the processes it had (which should have exited with it)."""
        processes = descendants(self.serve.pid)
        asked = time.monotonic()
        os.kill(self.serve.pid, signal.SIGTERM)
        status = self.serve.wait(timeout=STOP_BOUND_S)
        return status, time.monotonic() - asked, processes

    def stop(self) -> None:
        os.killpg(self.serve.pid, signal.SIGTERM)
        self.serve.wait(timeout=60)


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
    assert sorted(path.name for path in served.unit_folder().glob("*.sock")) == ["app.1.sock"]


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


def unit_without_database(tmp_path: Path):
    """A production unit started on a database that is nowhere: its reloads need none."""
    unreachable = f"postgres://nobody@{str(tmp_path / 'no-server').replace('/', '%2F')}/plantstore"
    return live_unit(tmp_path, DATABASE_URL=unreachable).start()


def granian_children(parent: int) -> list[int]:
    """The Granian main processes among `parent`'s children."""
    return [pid for pid in children(parent) if b"bin/granian" in command_line(pid)]


def test_a_reload_nginx_refuses_the_config_of_leaves_the_running_version_serving(tmp_path):
    unit = unit_without_database(tmp_path)
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
        app_servers = granian_children(os.getpid())
    finally:
        unit.stop()

    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    assert state == (app, nginx_workers, ["app.0.sock"])
    assert app_servers == [app]  # the new one was stopped


def test_a_reload_with_a_setting_nginx_cannot_take_as_written_fails_naming_it_and_the_running_version_serves_on(
    tmp_path,
):
    unit = unit_without_database(tmp_path)
    try:
        app = unit.app.process.pid
        # A `$` would be a variable to nginx (a log file per Host); the reload, SIGHUP's, refuses it.
        with pytest.raises(RuntimeError, match=r"PLANTS_ACCESS_LOG: '/var/log/plants-\$host.log' holds '\$'"):
            unit.reload({**unit.env, "PLANTS_LISTEN": unit.listen, "PLANTS_ACCESS_LOG": "/var/log/plants-$host.log"})
        app_servers_started = unit.log().count("Starting granian")
        liveness = request(f"{unit.url}/livez")
        state = (
            unit.app.process.pid,
            unit.env.get("PLANTS_ACCESS_LOG"),
            sorted(path.name for path in unit.run_dir.glob("*.sock")),
        )
        app_servers = granian_children(os.getpid())
    finally:
        unit.stop()

    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    assert state == (app, None, ["app.0.sock"])
    assert (app_servers, app_servers_started) == ([app], 1)  # refused before a new one was started


def test_a_reload_nginx_does_not_take_fails_and_the_running_version_serves_on(tmp_path):
    unit = unit_without_database(tmp_path)
    try:
        app, nginx = unit.app.process.pid, unit.nginx.process.pid
        os.kill(nginx, signal.SIGSTOP)  # nginx's master takes no signal: the new config is never read
        try:
            with pytest.raises(RuntimeError, match="nginx did not take the new config within 10 s"):
                unit.reload()
        finally:
            os.kill(nginx, signal.SIGCONT)  # it reads the config again: the running version's
        time.sleep(1)
        retired = [unit.retire() for _ in range(3)]
        health = request(f"{unit.url}/healthz")  # the running app server answers: its database does not
        state = (unit.app.process.pid, sorted(path.name for path in unit.run_dir.glob("*.sock")))
        app_servers = granian_children(os.getpid())
    finally:
        unit.stop()

    assert (health[0], health[2]) == (503, '{"error": 50300, "message": "The database does not answer."}')
    assert (retired, state, app_servers) == ([False] * 3, (app, ["app.0.sock"]), [app])


def test_a_reload_whose_config_check_does_not_finish_fails_and_the_running_version_serves_on(tmp_path, monkeypatch):
    unit = unit_without_database(tmp_path)
    try:
        app, nginx = unit.app.process.pid, unit.nginx.process.pid
        nginx_workers = children(nginx)
        # `nginx -t` waits on a name server that does not answer (a host name in its config): it hangs.
        hanging = tmp_path / "bin"
        hanging.mkdir()
        (hanging / "nginx").write_text(
            f'#!/bin/sh\ncase " $* " in *" -t "*) exec sleep 60;; esac\nexec {shutil.which("nginx")} "$@"\n'
        )
        (hanging / "nginx").chmod(0o755)
        monkeypatch.setenv("PATH", f"{hanging}:{os.environ['PATH']}")
        monkeypatch.setattr("deploy.unit.NGINX_CHECK_S", 2)
        with pytest.raises(RuntimeError, match="nginx did not finish checking the new config within 2 s"):
            unit.reload()
        liveness = request(f"{unit.url}/livez")
        state = (unit.app.process.pid, children(nginx), sorted(path.name for path in unit.run_dir.glob("*.sock")))
        app_servers = granian_children(os.getpid())
    finally:
        unit.stop()

    assert (liveness[0], liveness[2]) == (200, '{"status": "ok"}')
    assert (state, app_servers) == ((app, nginx_workers, ["app.0.sock"]), [app])


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
        sockets = sorted(path.name for path in served.unit_folder().glob("*.sock"))
        serving = served.process.poll() is None
    finally:
        served.stop()

    assert (created[0], created[2]) == (200, '{"id":1,"name":"Fern"}')
    assert (serving, still_serving, sockets) == (True, app, ["app.0.sock"])
    assert "the new version is broken" in served.log()


# The operator's edits of the settings file, each a reload cannot serve with: the file's text, edited
# (None: the file moved away).
EDITS = {
    "not-a-number": (
        lambda text: text.replace("APP_THREADS=4", "APP_THREADS=four").encode(),
        "APP_THREADS must be a whole number, not 'four'",
    ),
    "past-nginx-s-wait": (
        lambda text: text.replace("PLANTS_DATABASE_TIMEOUT_S=5", "PLANTS_DATABASE_TIMEOUT_S=20").encode(),
        "PLANTS_DATABASE_TIMEOUT_S is 20: a request could take 34 s",
    ),
    "file-moved-away": (
        lambda text: None,
        "DJANGO_ENV_FILE: {file} cannot be read (No such file or directory)",
    ),
    "not-utf-8": (
        lambda text: (text + "# Réseau des bureaux\n").encode("latin-1"),
        "DJANGO_ENV_FILE: {file}, line 3, is not UTF-8",
    ),
    # systemd's EnvironmentFile= reads it; django-environ would skip it, and serve /admin to every client.
    "spaces-around-equals": (
        lambda text: (text + "PLANTS_ADMIN_CLIENTS = 127.0.0.5\n").encode(),
        "DJANGO_ENV_FILE: {file}, line 3 (PLANTS_ADMIN_CLIENTS), is not NAME=value",
    ),
}


@pytest.mark.parametrize("edit", EDITS)
def test_a_reload_with_settings_the_new_version_cannot_serve_with_fails_naming_why_and_the_running_version_serves_on(
    tmp_path, edit
):
    # The settings a reload reads anew: those of the file, not of make serve's environment.
    served, settings_file = MakeServe(tmp_path), tmp_path / "plantstore.env"
    in_the_file = {name: served.env.pop(name) for name in ("APP_THREADS", "PLANTS_DATABASE_TIMEOUT_S")}
    settings_file.write_text("".join(f"{name}={value}\n" for name, value in in_the_file.items()))
    served.env["DJANGO_ENV_FILE"] = str(settings_file)
    edited, refused_because = EDITS[edit]
    served.start()
    try:
        token = served.token()
        app = {served.pid_of(b"bin/granian"), *served.app_workers()}
        # The operator's edit, then `kill -HUP` (systemctl reload).
        if (content := edited(settings_file.read_text())) is None:
            settings_file.rename(tmp_path / "plantstore.env.moved")
        else:
            settings_file.write_bytes(content)

        os.kill(served.pid_of(b"deploy.serve"), signal.SIGHUP)
        wait_until(lambda: "serve: the reload failed" in served.log(), served.process, 30, "the failed reload")
        created = request(f"{served.url}/plants", {"id": 1, "name": "Fern"}, token)
        still_serving = {served.pid_of(b"bin/granian"), *served.app_workers()}
        serving = served.process.poll() is None
    finally:
        served.stop()

    assert (created[0], created[2]) == (200, '{"id":1,"name":"Fern"}')
    assert (serving, still_serving) == (True, app)
    reason = refused_because.format(file=settings_file)
    assert f"serve: the reload failed, the running version serves on: {reason}" in served.log()


# A version whose app takes minutes to load (a cold disk, a slow import): its start or reload is under way.
SLOW_TO_LOAD = "import time\ntime.sleep(300)\n"
STOP_BOUND_S = 90  # the systemd unit's TimeoutStopSec=


@pytest.mark.parametrize("during", ["start", "reload"])
def test_sigterm_during_a_start_or_a_reload_stops_the_unit_within_its_bound_leaving_nothing(tmp_path, during):
    releases = LinkedReleases(tmp_path, wsgi_prelude=SLOW_TO_LOAD if during == "start" else "", wait=during == "reload")
    try:
        if during == "reload":
            releases.switch(release(tmp_path / "releases" / "2", "2.0.0", SLOW_TO_LOAD))
            os.kill(releases.serve.pid, signal.SIGHUP)
            wait_until(lambda: "serve: reloading" in releases.log.read_text(), releases.serve, 30, "the reload")
        # The new app server has started, and its workers are loading the app.
        loading = 2 if during == "reload" else 1
        wait_until(lambda: len(granian_children(releases.serve.pid)) == loading, releases.serve, 30, "the app server")
        status, stopped_after, processes = releases.terminate()
    finally:
        if releases.serve.poll() is None:
            releases.stop()

    assert (status, stopped_after < STOP_BOUND_S) == (0, True)
    assert wait_for_exit(processes, timeout=5) == []
    assert "serve: stopping gracefully, during a start or a reload" in releases.log.read_text()


def test_sigterm_while_a_worker_still_loads_the_app_stops_the_unit_in_seconds(tmp_path):
    # The first worker loads the app and serves; the second is still loading it (a slow import).
    first = tmp_path / "first-worker"
    one_slow = f"import os, time\ntry:\n    os.close(os.open({str(first)!r}, os.O_CREAT | os.O_EXCL))\nexcept FileExistsError:\n    time.sleep(300)\n"
    releases = LinkedReleases(tmp_path, wsgi_prelude=one_slow, wait=False)
    try:
        wait_until(lambda: "serve: nginx on" in releases.log.read_text(), releases.serve, 60, "its ready line")
        wait_until(lambda: releases.log.read_text().count("Spawning worker-") == 2, releases.serve, 30, "2 workers")
        assert releases.log.read_text().count("Started worker-") == 1  # the second one is loading the app
        status, stopped_after, processes = releases.terminate()
    finally:
        if releases.serve.poll() is None:
            releases.stop()

    # Not Granian's 35 s for a loading worker: nothing could reach the app server once nginx had stopped.
    assert (status, stopped_after < 15) == (0, True), f"stopped after {stopped_after:.1f} s"
    assert wait_for_exit(processes, timeout=5) == []
