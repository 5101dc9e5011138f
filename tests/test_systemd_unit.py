"""deploy/plantstore.service as an operator installs it: systemd accepts the file, and its command
line, started with its environment as an unprivileged user, serves with no process as root, reloads
without a failed request, stops, and counts on from its runtime directory after a restart."""

import hashlib
import json
import os
import pwd
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from deploy.processes import ROOT, children, http_status, wait_until
from localcluster.cluster import Redis
from localcluster.processes import command_line, descendants, free_port
from tests.live import (
    DEPLOYED_SETTINGS,
    PUBLIC_HOST,
    Load,
    ProxiedConnection,
    request,
    wait_for_app_workers,
    wait_for_exit,
)

UNIT_FILE = ROOT / "deploy" / "plantstore.service"
# The paths the unit names, where the README installs it; a test puts its own in their place.
INSTALL = "/opt/plantstore"
VENV = "/opt/plantstore/.venv"
ENVIRONMENT_FILE = "/etc/plantstore/plantstore.env"
RUNTIME_DIRECTORY = "/run/plantstore"
STATE_DIRECTORY = "/var/lib/plantstore"
JOURNAL_SYSLOG = "/run/systemd/journal/dev-log"  # journald's syslog socket
SYSLOG_PREFIX = r"<\d+>\w{3} [ \d]\d \d\d:\d\d:\d\d "  # RFC 3164's priority and timestamp, no host name
# The PATH systemd 252 gives a system service.
SYSTEMD_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The unit's user, plantstore, is not made on a test machine: nobody, as unprivileged, stands in.
USER = "nobody"
RATE = 100_000  # a day: counted, never reached
# The unit's command serves a SQLite file in its state directory, never the run's test database.
pytestmark = pytest.mark.own_database
# Starting it as another user in a mount namespace of its own takes root, as it takes systemd.
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="starts the unit as another user: needs root")


def service_settings(text: str) -> dict[str, list[str]]:
    """The [Service] section of a unit file: each key's values, in order."""
    settings, section = {}, None
    for line in map(str.strip, text.splitlines()):
        if line.startswith("["):
            section = line
        elif line and not line.startswith(("#", ";")) and section == "[Service]":
            key, _, value = line.partition("=")
            settings.setdefault(key, []).append(value)
    return settings


def environment_file(path: Path) -> dict[str, str]:
    """An EnvironmentFile= as systemd reads it: KEY=value lines, # comments."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    return dict(line.split("=", 1) for line in lines if line and not line.startswith(("#", ";")))


def installed(text: str, paths: dict[str, str]) -> str:
    """The unit file with the paths it names replaced in one pass, the longest first where two
    start alike (the venv before the install)."""
    named = "|".join(map(re.escape, sorted(paths, key=len, reverse=True)))
    return re.sub(named, lambda found: paths[found.group()], text)


@pytest.fixture(scope="session")
def operator_venv() -> Path:
    """/opt/plantstore/.venv as the README makes it, from Debian's python3 (`make <venv>/debian-python/.installed`).

    In /opt, one per requirements.txt and kept: its scripts name its python by path (`#!…/bin/python`),
    so it must be where the unit's sandbox shows it, never in /tmp or a home directory (PrivateTmp=,
    ProtectHome=). Every checkout with the same requirements (CI's clones) shares it.
    """
    requirements = hashlib.sha256((ROOT / "requirements.txt").read_bytes()).hexdigest()[:12]
    venv = Path("/opt") / f"plantstore-test-venv-{requirements}"
    target = venv / "debian-python"
    subprocess.run(["make", f"VENV={venv}", f"{target}/.installed"], cwd=ROOT, check=True)  # its output in the report
    return target


def test_the_unit_file_passes_systemd_analyze_verify_without_a_warning(tmp_path, operator_venv):
    unit = tmp_path / "plantstore.service"
    unit.write_text(installed(UNIT_FILE.read_text(), {INSTALL: str(ROOT), VENV: str(operator_venv)}))
    uninstalled = tmp_path / "uninstalled" / "plantstore.service"
    uninstalled.parent.mkdir()
    shutil.copy(UNIT_FILE, uninstalled)

    def verify(path: Path) -> tuple[int, str]:
        result = subprocess.run(["systemd-analyze", "verify", "--man=no", str(path)], capture_output=True, text=True)
        return result.returncode, result.stdout + result.stderr

    assert verify(unit) == (0, "")
    # The check has teeth: without the venv in /opt/plantstore, the command is missing.
    assert "/opt/plantstore/.venv/bin/python is not executable" in verify(uninstalled)[1]


def test_the_unit_s_sandbox_keeps_its_systemd_analyze_security_exposure_of_2_8(tmp_path, operator_venv):
    unit = tmp_path / "plantstore.service"
    unit.write_text(installed(UNIT_FILE.read_text(), {INSTALL: str(ROOT), VENV: str(operator_venv)}))

    # 2.8 of 10 ("OK"): dropping ProtectSystem=, PrivateTmp=, NoNewPrivileges= or the empty
    # CapabilityBoundingSet= raises it (to 3.0, 3.0, 3.0, 4.6) and fails this.
    security = ["systemd-analyze", "security", "--offline=yes", "--threshold=28", "--no-pager", str(unit)]
    result = subprocess.run(security, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def test_the_unit_stops_by_sigterm_to_serve_alone_with_time_for_the_graceful_stop():
    settings = service_settings(UNIT_FILE.read_text())

    # The graceful stop is serve.py's to run: SIGTERM to it alone, and time for nginx's and the app's 40 s each.
    assert (settings["KillMode"], settings["KillSignal"], int(settings["TimeoutStopSec"][0]) > 80) == (
        ["mixed"],
        ["SIGTERM"],
        True,
    )


def test_systemd_waits_longer_for_a_reload_than_its_worst_case_and_stops_within_the_units_bound():
    from deploy import reload, unit

    settings = service_settings(UNIT_FILE.read_text())
    timeout_start = int(settings["TimeoutStartSec"][0])  # it bounds ExecReload= too

    # reload.py reports a reload's outcome after its slowest steps, and systemd waits for reload.py.
    assert unit.RELOAD_WORST_S < reload.WAIT_S < timeout_start
    # A start: the app server's socket, then /livez, each within its bound.
    assert unit.APP_START_S + 60 < timeout_start
    # A stop: nginx, then every app server at once.
    assert 2 * unit.STOP_S < int(settings["TimeoutStopSec"][0])


# ProtectSystem=strict in a mount namespace: every mount read-only but the API file systems and
# the ones named (bound to themselves first, so that they are mounts of their own).
READ_ONLY_BUT = """findmnt -rno TARGET | while read -r target; do
  case " {writable} " in *" $target "*) continue ;; esac
  case "$target" in /proc|/proc/*|/sys|/sys/*|/dev|/dev/*) continue ;; esac
  # A mount whose mount point has gone since it was listed (a container stopped meanwhile) leaves
  # nothing to make read-only.
  mount -o remount,bind,ro "$target" || [ ! -e "$target" ]
done"""


class InstalledService:
    """The unit run as systemd runs it, without systemd: its ExecStart from its WorkingDirectory,
    with its environment (Environment=, then EnvironmentFile=), its UMask, in a mount namespace
    with its file system options, as USER with what setpriv can apply of its hardening, and a
    runtime and state directory of USER's in `work_dir`."""

    def __init__(self, work_dir: Path, venv: Path, install: Path):
        self.user = pwd.getpwnam(USER)
        self.runtime_dir, self.state_dir = work_dir / "run", work_dir / "state"
        for directory in (self.runtime_dir, self.state_dir):
            directory.mkdir(mode=0o700)
            os.chown(directory, self.user.pw_uid, self.user.pw_gid)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env_file = env_file = work_dir / "plantstore.env"
        # .env.example copied to the unit's EnvironmentFile= and edited, as docs/deploying.md says.
        settings = {
            **DEPLOYED_SETTINGS,
            "DJANGO_SECRET_KEY": f"systemd-test-secret-key-{'x' * 40}",
            "DATABASE_URL": f"sqlite:///{self.state_dir}/db.sqlite3",
            "DJANGO_STATIC_ROOT": f"{work_dir}/static",
            "PLANTS_THROTTLE_RATE": f"{RATE}/day",
            "PLANTS_LISTEN": f"127.0.0.1:{self.port}",
        }
        env_file.write_text("".join(f"{name}={value}\n" for name, value in settings.items()))
        env_file.chmod(0o600)
        paths = {
            INSTALL: str(install),
            VENV: str(venv),
            ENVIRONMENT_FILE: str(env_file),
            RUNTIME_DIRECTORY: str(self.runtime_dir),
            STATE_DIRECTORY: str(self.state_dir),
            JOURNAL_SYSLOG: str(work_dir / "dev-log"),
        }
        self.settings = service_settings(installed(UNIT_FILE.read_text(), paths))
        # journald's syslog socket: what the unit's processes send there.
        self.syslog = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.syslog.bind(paths[JOURNAL_SYSLOG])
        os.chmod(paths[JOURNAL_SYSLOG], 0o666)
        self.syslog_messages: list[str] = []
        self.python = venv / "bin" / "python"
        self.log_path = work_dir / "service.log"
        self.process: subprocess.Popen | None = None
        # systemd's notify socket (Type=notify): each message with its sender's pid (SO_PASSCRED).
        self.notify_path = work_dir / "notify"
        self.notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.notify.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
        self.notify.bind(str(self.notify_path))
        os.chown(self.notify_path, self.user.pw_uid, self.user.pw_gid)
        self.notifications: list[tuple[int, str]] = []  # (pid, state) since the last start
        self.health_when_ready: int | None = None

    def configure(self, **settings: str) -> "InstalledService":
        """Add `settings` to the unit's environment file, as an operator edits it."""
        with self.env_file.open("a") as env_file:
            env_file.writelines(f"{name}={value}\n" for name, value in settings.items())
        return self

    def environment(self) -> dict[str, str]:
        env = {
            "PATH": SYSTEMD_PATH,
            "HOME": self.user.pw_dir,
            "USER": USER,
            "LOGNAME": USER,
            "SHELL": self.user.pw_shell,
            "RUNTIME_DIRECTORY": str(self.runtime_dir),
            "STATE_DIRECTORY": str(self.state_dir),
        }
        for value in self.settings.get("Environment", []):
            env.update(item.split("=", 1) for item in shlex.split(value))
        for path in self.settings["EnvironmentFile"]:
            env.update(environment_file(Path(path)))
        return env

    def as_user(self, command: list[str]) -> list[str]:
        """`command` as USER: NoNewPrivileges=yes and an empty CapabilityBoundingSet= applied."""
        hardening = []
        if self.settings.get("NoNewPrivileges") == ["yes"]:
            hardening.append("--no-new-privs")
        if self.settings.get("CapabilityBoundingSet") == [""]:
            hardening += ["--bounding-set=-all", "--inh-caps=-all"]
        user = [f"--reuid={self.user.pw_uid}", f"--regid={self.user.pw_gid}", "--clear-groups"]
        return ["setpriv", *user, *hardening, *command]

    def sandbox(self) -> list[str]:
        """A prefix running a command with what a mount namespace does of the unit's ProtectSystem=strict
        (all read-only but its runtime and state directories), PrivateTmp= (a /tmp and /var/tmp of
        its own, empty) and ProtectHome= (/home, /root and /run/user empty)."""
        script = ["set -e"]
        if self.settings.get("ProtectSystem") == ["strict"]:
            writable = " ".join(shlex.quote(str(path)) for path in (self.runtime_dir, self.state_dir))
            script += [
                f"for path in {writable}; do mount --bind $path $path; done",
                READ_ONLY_BUT.format(writable=writable),
            ]
        if self.settings.get("PrivateTmp") == ["yes"]:
            script.append("for path in /tmp /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $path; done")
        if self.settings.get("ProtectHome") == ["yes"]:
            script.append(
                "for path in /home /root /run/user; do [ ! -d $path ] || mount -t tmpfs -o ro tmpfs $path; done"
            )
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "\n".join([*script, 'exec "$@"']),
            "sandbox",
        ]

    def run(self, command: list[str], as_user: bool = True) -> str:
        umask = int(self.settings["UMask"][0], 8)
        return subprocess.run(
            self.as_user(command) if as_user else command,
            cwd=self.settings["WorkingDirectory"][0],
            env=self.environment(),
            preexec_fn=(lambda: os.umask(umask)) if as_user else None,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def deploy(self) -> "InstalledService":
        """docs/deploying.md's deploy step: collectstatic as root, migrate as the service's user."""
        self.run([str(self.python), "manage.py", "collectstatic", "--no-input", "-v", "0"], as_user=False)
        self.run([str(self.python), "manage.py", "migrate", "--no-input"])
        return self

    def token(self) -> str:
        return self.run([str(self.python), "manage.py", "token", "issue", "systemd-client"]).strip()

    def start(self) -> "InstalledService":
        """Start ExecStart; started when it says READY=1 (Type=notify), as systemd waits for it. Its
        output goes to a stream socket, as to the journal's, copied to the log from there."""
        [exec_start] = self.settings["ExecStart"]
        umask = int(self.settings["UMask"][0], 8)
        self.notifications = []
        journal, output = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        stream = os.fstat(output.fileno())
        with output:
            self.process = subprocess.Popen(
                [*self.sandbox(), *self.as_user(shlex.split(exec_start))],
                cwd=self.settings["WorkingDirectory"][0],
                env={
                    **self.environment(),
                    "NOTIFY_SOCKET": str(self.notify_path),
                    "JOURNAL_STREAM": f"{stream.st_dev}:{stream.st_ino}",
                },
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=lambda: os.umask(umask),
            )

        def copy_to_log() -> None:
            with journal, self.log_path.open("ab", buffering=0) as log:
                while chunk := journal.recv(65536):
                    log.write(chunk)

        threading.Thread(target=copy_to_log, daemon=True).start()
        try:
            wait_until(lambda: self.received("READY=1"), self.process, 60, "READY=1")
        except RuntimeError as error:
            self.stop()
            raise RuntimeError(f"the unit's ExecStart did not come up: {error}\n{self.log()}") from None
        self.health_when_ready = http_status(f"{self.url}/healthz", host=PUBLIC_HOST)
        wait_for_app_workers(self.log, self.process)
        return self

    def received(self, state: str, timeout: float = 0.1) -> bool:
        """Whether `state` has come on the notify socket, waiting up to `timeout` seconds for more."""
        self.notify.settimeout(timeout)
        try:
            while True:
                data, ancillary, _, _ = self.notify.recvmsg(4096, socket.CMSG_SPACE(12))
                [(_, _, credentials)] = ancillary  # SCM_CREDENTIALS: pid, uid, gid
                self.notifications.append((struct.unpack("3i", credentials)[0], data.decode()))
                self.notify.settimeout(0)
        except (TimeoutError, BlockingIOError):
            pass
        return any(line == state for _, sent in self.notifications for line in sent.splitlines())

    def syslog_received(self) -> list[str]:
        """The messages sent to the journal's syslog socket so far."""
        self.syslog.settimeout(0)
        try:
            while True:
                self.syslog_messages.append(self.syslog.recv(65536).decode())
        except BlockingIOError:
            return self.syslog_messages

    def reload(self) -> None:
        [exec_reload] = self.settings["ExecReload"]
        self.run(shlex.split(exec_reload.replace("$MAINPID", str(self.process.pid))))

    def stop(self) -> int:
        """systemd's stop under KillMode=mixed: KillSignal to the main process alone, then, after
        TimeoutStopSec, SIGKILL to every process left."""
        if self.process.poll() is None:
            left = self.processes()
            os.kill(self.process.pid, getattr(signal, self.settings["KillSignal"][0]))
            try:
                self.process.wait(timeout=int(self.settings["TimeoutStopSec"][0]))
            except subprocess.TimeoutExpired:
                for pid in left:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                self.process.wait()
        deadline = time.monotonic() + 1
        while not self.received("STOPPING=1") and time.monotonic() < deadline:
            pass
        return self.process.returncode

    def processes(self) -> list[int]:
        return [self.process.pid, *descendants(self.process.pid)]

    def nginx_master(self) -> int:
        return next(pid for pid in children(self.process.pid) if b"nginx" in command_line(pid))

    def app_server(self) -> int:
        """The app server's main process: serve.py's child that is not nginx."""
        [app] = [pid for pid in children(self.process.pid) if b"nginx" not in command_line(pid)]
        return app

    def app_workers(self) -> set[int]:
        """The app server's workers: its main process's children."""
        return set(children(self.app_server()))

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def privileges(pid: int) -> dict[str, str]:
    """The user ids (real, effective, saved, file system), effective capabilities and no_new_privs of a process."""
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {key: status[key].strip() for key in ("Uid", "CapEff", "NoNewPrivs")}


@pytest.fixture
def service(operator_venv):
    # Not in /tmp, which the unit's PrivateTmp= hides, nor in pytest's folder, which USER cannot reach.
    work_dir = Path(tempfile.mkdtemp(prefix="plantstore-systemd.", dir="/run"))
    work_dir.chmod(0o755)
    # The checkout, read-only, where the unit's sandbox still shows it, as it shows /opt/plantstore: a
    # checkout in /tmp or a home directory would be hidden by its PrivateTmp= or ProtectHome=.
    install = work_dir / "opt-plantstore"
    install.mkdir()
    subprocess.run(["mount", "--bind", str(ROOT), str(install)], check=True)
    installed_service = None
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(install)], check=True)
        installed_service = InstalledService(work_dir, operator_venv, install)
        yield installed_service.deploy()
    finally:
        if installed_service and installed_service.process:
            installed_service.stop()
        if installed_service:
            installed_service.notify.close()
            installed_service.syslog.close()
        subprocess.run(["umount", str(install)], check=False)
        if not os.path.ismount(install):  # never remove the checkout through its mount
            shutil.rmtree(work_dir, ignore_errors=True)


@pytest.mark.live
@as_root
def test_its_command_serves_as_an_unprivileged_user_reloads_without_a_failed_request_and_stops(service):
    service.start()
    token = service.token()
    health = request(f"{service.url}/healthz")
    created = request(f"{service.url}/plants", {"id": -1, "name": "Monstera"}, token)  # the load's are 1, 2, …
    processes = service.processes()
    uid = str(service.user.pw_uid)

    assert (service.health_when_ready, health[0], health[1]["Server"], created[0], created[2]) == (
        200,
        200,
        "nginx",
        200,
        '{"id":-1,"name":"Monstera"}',
    )
    assert len(processes) >= 6, service.log()  # serve.py, nginx's master and worker, the app's master and 2 workers
    # A refusal nginx answers itself is logged by nginx alone, to the journal's syslog socket: its
    # output, a socket as the journal's is, cannot be opened again by path.
    traced = request(f"{service.url}/plants", method="TRACE")
    wait_until(lambda: any('"TRACE"' in line for line in service.syslog_received()), service.process, 5, "nginx's line")
    [edge_line] = [line for line in service.syslog_received() if '"TRACE"' in line]
    assert traced[0] == 405
    # A syslog message as journald reads one: <priority>timestamp tag: the JSON line.
    assert re.fullmatch(
        SYSLOG_PREFIX + r'nginx: \{"edge": true, "method": "TRACE", "path": "/plants", "status": 405, '
        r'"cause": "edge", "upstream_status": "", "client": "127\.0\.0\.10", "request_id": "[0-9a-f]{32}", '
        r'"duration_s": [\d.]+\}',
        edge_line,
    ), edge_line
    assert {pid: privileges(pid) for pid in processes} == {
        pid: {"Uid": f"{uid}\t{uid}\t{uid}\t{uid}", "CapEff": "0000000000000000", "NoNewPrivs": "1"}
        for pid in processes
    }

    old_app = {service.app_server(), *service.app_workers()}
    nginx = service.nginx_master()
    folder = Path(command_line(nginx).decode().split("-p ")[1].split(" ")[0])  # the unit's temp folder
    # In the unit's own /tmp: there for its processes, not for the machine's.
    assert (Path(f"/proc/{nginx}/root{folder}/app.0.sock").is_socket(), folder.exists()) == (True, False)
    with Load(f"{service.url}/plants", token, clients=4, limit=10_000, timeout=30) as load:
        load.wait_for(100)
        service.reload()
        # A new app server (the new code) on a new socket; the old one stops once nginx has left it.
        wait_until(lambda: "serve: reloaded" in service.log(), service.process, 60, "the reload")
        wait_until(lambda: "old app server has stopped" in service.log(), service.process, 60, "the old app server")
        # Only the new app server is left: nginx sends it everything.
        answered_after = len(load.answers)
        load.wait_for(answered_after + 300, timeout=60)
    new_app = {service.app_server(), *service.app_workers()}
    processes = service.processes()

    assert len(load.answers) >= answered_after + 300
    assert [(status, text) for _, status, _, text, _ in load.answers if status != 200] == []
    assert (len(new_app), new_app & old_app, wait_for_exit(list(old_app), timeout=5)) == (3, set(), [])
    assert Path(f"/proc/{nginx}/root{folder}/app.1.sock").is_socket()
    assert (service.stop(), wait_for_exit(processes)) == (0, [])
    # Only serve.py spoke to systemd (NotifyAccess=main): ready, then stopping.
    assert service.notifications == [(service.process.pid, "READY=1"), (service.process.pid, "STOPPING=1")]


@pytest.mark.live
@as_root
def test_the_rate_limit_counts_survive_a_restart(service):
    def create(plant_id: int, token: str) -> tuple[int, str]:
        status, headers, _ = request(f"{service.url}/plants", {"id": plant_id, "name": "Fern"}, token)
        return status, headers["RateLimit"].split(";")[1]

    # The counts are per day (RATE/day), a window that starts at UTC midnight: a test running across
    # it would see a new window, so within two minutes of it, the test waits for the new day.
    seconds_left_today = 86400 - time.time() % 86400
    if seconds_left_today < 120:
        time.sleep(seconds_left_today + 1)
    service.start()
    token = service.token()
    before = [create(plant_id, token) for plant_id in (1, 2)]
    service.stop()
    service.start()
    after = create(3, token)

    assert before + [after] == [(200, f"r={RATE - count}") for count in (1, 2, 3)]


@pytest.mark.live
@as_root
def test_with_opentelemetry_on_its_workers_export_spans_in_the_caller_s_trace_from_the_sandbox(service):
    trace_id = os.urandom(16).hex()
    service.configure(OTEL_TRACES_EXPORTER="otlp_json_file", OTEL_BSP_SCHEDULE_DELAY="50").start()
    token = service.token()
    connection = ProxiedConnection(service.port)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    connection.request(
        "POST", "/plants", '{"id": 1, "name": "Fern"}', {**headers, "traceparent": f"00-{trace_id}-00f067aa0ba902b7-01"}
    )
    status = connection.getresponse().status

    def server_spans() -> list[dict]:
        lines = [json.loads(line) for line in service.log().splitlines() if line.startswith('{"resourceSpans"')]
        return [
            span
            for line in lines
            for resource in line["resourceSpans"]
            for scope in resource["scopeSpans"]
            for span in scope["spans"]
            if span["traceId"] == trace_id and span["kind"] == 2
        ]

    wait_until(server_spans, service.process, 10, "the request's server span")
    [span] = server_spans()
    log_line = next(line for line in service.log().splitlines() if trace_id in line and " plants.requests " in line)
    assert (status, span["name"], span["parentSpanId"]) == (200, "POST /plants", "00f067aa0ba902b7")
    assert f'"trace_id": "{trace_id}", "span_id": "{span["spanId"]}"' in log_line


@pytest.mark.live
@as_root
def test_it_is_ready_with_its_rate_limit_store_down_and_serves_once_the_store_is_back(service):
    redis = Redis()  # its port chosen, not started: down when the unit starts
    service.configure(REDIS_URL=redis.url, PLANTS_RATE_LIMIT_FAILURE_MODE="closed").start()
    try:
        token = service.token()
        health = request(f"{service.url}/healthz")
        create = request(f"{service.url}/plants", {"id": 1, "name": "Rose"}, token)
        redis.start()
        wait_until(lambda: request(f"{service.url}/healthz")[0] == 200, service.process, 15, "/healthz with Redis back")
        after = request(f"{service.url}/plants", {"id": 2, "name": "Fern"}, token)
    finally:
        redis.stop()

    assert service.health_when_ready == 503  # READY=1 came with the store down
    assert (health[0], json.loads(health[2])) == (
        503,
        {"error": 50300, "message": "The rate-limit store does not answer."},
    )
    assert (create[0], json.loads(create[2])["error"]) == (503, 50300)
    assert (after[0], json.loads(after[2])) == (200, {"id": 2, "name": "Fern"})
