"""Server processes and their configs: render a config, start a server, wait for it, signal it, stop it."""

import http.client
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from string import Template

import environ

from plantstore_site.env_file import problem as settings_file_problem

# The checkout by the path it was configured by, not resolved: $PWD when it names it (as a shell
# and make set it). Servers start from there, so a release switched by a symlink
# is what the next app server (a reload) runs.
_HERE = Path(os.path.abspath(__file__)).parent.parent
_PWD = os.environ.get("PWD", "")
ROOT = Path(_PWD) if os.path.isabs(_PWD) and os.path.isdir(_PWD) and os.path.samefile(_PWD, _HERE) else _HERE
BIN = Path(sys.executable).parent  # the venv's scripts (granian…), by the configured path too


def with_env_file(env: dict) -> dict:
    """`env` with the lines of the file its DJANGO_ENV_FILE names beneath it (a variable set in both
    keeps env's value), as the settings read them: the unit's own settings (PLANTS_LISTEN,
    DJANGO_ALLOWED_HOSTS for its probes, PLANTS_TRUSTED_PROXIES, ...) may be there too. A file that
    cannot be read as written is a RuntimeError naming it (plantstore_site/env_file.py)."""
    if not env.get("DJANGO_ENV_FILE"):
        return dict(env)
    if unreadable := settings_file_problem(env["DJANGO_ENV_FILE"]):
        raise RuntimeError(f"DJANGO_ENV_FILE: {unreadable}")

    class FileEnv(environ.Env):
        ENVIRON = dict(env)

    FileEnv.read_env(env["DJANGO_ENV_FILE"])
    return FileEnv.ENVIRON


class ConfigTemplate(Template):
    """@NAME@ placeholders: `$` stays nginx's, HAProxy's and PostgreSQL's own; a stray `@` is an error."""

    delimiter, flags = "@", 0
    pattern = r"@(?:(?P<named>[A-Z_]+)@|(?P<escaped>(?!))|(?P<braced>(?!))|(?P<invalid>))"


def render(template: Path, destination: Path, **values: str) -> Path:
    """Write `template` with its @NAME@s filled in from `values`: a name missing on either side is an error."""
    config = ConfigTemplate(template.read_text())
    if unused := sorted(set(values) - set(config.get_identifiers())):
        raise KeyError(f"{template} has no placeholder {unused}")
    destination.write_text(config.substitute(values))
    return destination


def accepts_unix_connections(path: Path) -> bool:
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(0.5)
            conn.connect(str(path))
        return True
    except OSError:
        return False


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: Path, host: str, timeout: float):
        super().__init__(host, timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def http_status(url: str, timeout: float = 2, unix_socket: Path | None = None, host: str | None = None) -> int | None:
    """The status of GET `url` (to `unix_socket` if given; `host` as the Host), None when nothing answered."""
    return http_answer(url, timeout, unix_socket, host)[0]


def http_answer(
    url: str, timeout: float = 2, unix_socket: Path | None = None, host: str | None = None
) -> tuple[int | None, dict[str, str]]:
    """GET `url` as http_status() does: (its status, its headers), (None, {}) when nothing answered."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    address, _, port = host_port.rpartition(":")
    if unix_socket:
        connection = UnixHTTPConnection(unix_socket, address, timeout)
    else:
        connection = http.client.HTTPConnection(address.strip("[]"), int(port), timeout=timeout)
    try:
        connection.request("GET", f"/{path}", headers={"Host": host or address})
        response = connection.getresponse()
        return response.status, dict(response.getheaders())
    except (OSError, http.client.HTTPException):
        return None, {}
    finally:
        connection.close()


def wait_until(ready, process: subprocess.Popen | None, timeout: float, what: str) -> None:
    """Poll `ready()` until true; RuntimeError if `process` exits or `timeout` seconds pass first."""
    deadline = time.monotonic() + timeout
    while not ready():
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"{what}: the process exited ({process.returncode})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not ready after {timeout:.0f} s")
        time.sleep(0.05)


def stop_process(process: subprocess.Popen | None, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
    """Send `sig` and wait for the process; SIGKILL it if it has not exited within `timeout`."""
    if process and process.poll() is None:
        process.send_signal(sig)
        wait_or_kill(process, timeout)


def stop_all(servers: list["ServerProcess"], timeout: float, sig: int = signal.SIGTERM) -> None:
    """Send `sig` to every server at once, then wait for them all within `timeout`; SIGKILL the process
    group of any left (its children with it)."""
    running = [server for server in servers if server.running()]
    for server in running:
        server.process.send_signal(sig)
    deadline = time.monotonic() + timeout
    for server in running:
        try:
            server.process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.kill()


def wait_or_kill(process: subprocess.Popen, timeout: float) -> None:
    """Wait for the process to exit within `timeout`; SIGKILL it past that, and reap it."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def children(pid: int) -> list[int]:
    """The pids of a process's children (all its threads'), [] once it has exited."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += map(int, (task / "children").read_text().split())
        except FileNotFoundError:
            continue
    return found


class ServerProcess:
    """A server's process, its output appended to `log`, else this process's own. `supervised`: it
    gets SIGTERM when the thread that started it dies (setpriv --pdeathsig), so a supervisor killed
    with SIGKILL leaves no server behind."""

    def __init__(self, name, command, env, log=None, supervised=False):
        self.name, self.command, self.env, self.log_path, self.supervised = name, command, env, log, supervised
        self.process: subprocess.Popen | None = None

    def launch(self) -> subprocess.Popen:
        output = self.log_path.open("ab") if self.log_path else None
        try:
            self.process = subprocess.Popen(
                ["setpriv", "--pdeathsig", "TERM", *self.command] if self.supervised else self.command,
                cwd=ROOT,
                env=self.env,
                stdout=output,
                stderr=subprocess.STDOUT if output else None,
                process_group=0,  # a terminal's Ctrl-C or hang-up reaches the supervisor alone, which decides
            )
        finally:
            if output:
                output.close()
        return self.process

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
        stop_process(self.process, timeout, sig)

    def kill(self) -> None:
        """SIGKILL the server and its workers (its process group) at once, and reap it."""
        if self.process is not None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait()
