"""Server processes: start one with its log, wait for it to answer, signal it, stop it, and nothing left over."""

import http.client
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from string import Template

# Where the code is, as configured (the path it was started by, not resolved): a release switched by
# a symlink (/opt/plantstore -> a release's folder) is what the next app server runs (a reload).
ROOT = Path(os.path.abspath(__file__)).parent.parent
BIN = Path(sys.executable).parent  # the venv's scripts: gunicorn, granian, … (as configured, too)


def dying_with_parent(command: list[str]) -> list[str]:
    """`command` run by util-linux's setpriv with a parent-death signal: it gets SIGTERM when the
    thread that started it dies (Linux), so a supervisor killed with SIGKILL leaves no server
    behind. Only for servers started from a thread that lives as long as they do: the main thread
    of deploy/serve.py and scripts/cluster."""
    return ["setpriv", "--pdeathsig", "TERM", *command]


def render(template: Path, destination: Path, **values: str) -> Path:
    """Write a config template with its $NAMEs filled in (a missing one is an error)."""
    destination.write_text(Template(template.read_text()).substitute(values))
    return destination


EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
_given_ports: set[int] = set()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server about to start, chosen below the kernel's ephemeral
    range: the kernel gives the source ports of outgoing connections from that range, and one given
    between this choice and the server's bind makes the bind fail (seen when load tests ran beside
    other servers' starts). Never the same port twice in one process."""
    try:
        highest = int(EPHEMERAL_PORTS.read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        highest = 32767
    for _ in range(200):
        port = random.randint(LOWEST_PORT, max(highest, LOWEST_PORT + 1000))
        if port in _given_ports:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free port on {host} between {LOWEST_PORT} and {highest}")


def accepts_connections(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on `port`: a TCP connection opens (and is closed at once)."""
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def accepts_unix_connections(path: Path) -> bool:
    """Whether something listens on the unix socket `path`: a connection opens (and is closed at once)."""
    try:
        with socket.socket(socket.AF_UNIX) as conn:
            conn.settimeout(0.5)
            conn.connect(str(path))
        return True
    except OSError:
        return False


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the unix socket `path` (an app server's), the Host header still `host`'s."""

    def __init__(self, path: Path, host: str, timeout: float):
        super().__init__(host, timeout=timeout)
        self.path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(str(self.path))


def http_status(url: str, timeout: float = 2, unix_socket: Path | None = None, host: str | None = None) -> int | None:
    """The status of GET `url` (http://host:port/path), None when nothing answered; sent to
    `unix_socket` instead of host:port when given; `host` in the Host header, else the URL's."""
    host_port, _, path = url.removeprefix("http://").partition("/")
    address, _, port = host_port.rpartition(":")
    if unix_socket:
        connection = UnixHTTPConnection(unix_socket, address, timeout)
    else:
        connection = http.client.HTTPConnection(address, int(port), timeout=timeout)
    try:
        connection.request("GET", f"/{path}", headers={"Host": host or address})
        return connection.getresponse().status
    except (OSError, http.client.HTTPException):
        return None
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
    """Send `sig` (SIGTERM) to a server and wait for it; SIGKILL it if it has not stopped within `timeout`."""
    if process and process.poll() is None:
        process.send_signal(sig)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def children(pid: int) -> list[int]:
    """The pids of a process's children (all its threads'), [] once it has exited."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    found = []
    for task in tasks:
        try:
            found += map(int, Path(f"/proc/{pid}/task/{task}/children").read_text().split())
        except FileNotFoundError:
            continue
    return found


def descendants(pid: int) -> list[int]:
    """Every process `pid` started, however deep, that is still there: parents before their children."""
    found, pending = [], children(pid)
    while pending:
        child = pending.pop(0)
        found.append(child)
        pending.extend(children(child))
    return found


def relay(pipe: int, destination: int) -> None:
    """Copy what is written into `pipe` (its read end) to `destination` until its last writer
    closes it, from a thread. A read takes up to a pipe's capacity, so whole lines stay whole."""

    def copy() -> None:
        with open(pipe, "rb", buffering=0) as source:
            while chunk := source.read(65536):
                try:
                    while chunk:
                        chunk = chunk[os.write(destination, chunk) :]
                except OSError:  # the destination has gone (a closed terminal): drain on, or the writer blocks
                    pass

    threading.Thread(target=copy, name=f"relay-{pipe}", daemon=True).start()


class ServerProcess:
    """One server's process: its command, environment and output (appended to `log`, or this
    process's own stdout and stderr when None).

    `reopens_stdout`: the server opens its stdout again by path (nginx's `access_log /dev/stdout`).
    That fails on a socket (systemd's journal: ENXIO) and on a file of another user's (EACCES), so
    when its output is this process's stdout, it gets a pipe of its own instead, relayed to it."""

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict,
        log: Path | None = None,
        supervised: bool = False,
        reopens_stdout: bool = False,
    ):
        self.name, self.command, self.env, self.log_path = name, command, env, log
        self.supervised = supervised  # dying_with_parent: see there
        self.reopens_stdout = reopens_stdout
        self.process: subprocess.Popen | None = None

    def launch(self) -> subprocess.Popen:
        # Appended: a server started again keeps its earlier output in the same log.
        output = self.log_path.open("ab") if self.log_path else None
        relayed, stdout = os.pipe() if output is None and self.reopens_stdout else (None, output)
        try:
            self.process = subprocess.Popen(
                dying_with_parent(self.command) if self.supervised else self.command,
                cwd=ROOT,
                env=self.env,
                stdout=stdout,
                stderr=subprocess.STDOUT if output else None,
                # Its own process group: a terminal's Ctrl-C or hang-up reaches the supervisor,
                # which decides what each server gets.
                process_group=0,
            )
        except BaseException:
            if relayed is not None:
                os.close(relayed)
            raise
        finally:
            if output:
                output.close()
            if relayed is not None:
                os.close(stdout)  # the server holds the write end now
        if relayed is not None:
            relay(relayed, sys.stdout.fileno())
        return self.process

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def send(self, sig: int) -> None:
        if self.running():
            self.process.send_signal(sig)

    def stop(self, timeout: float = 15, sig: int = signal.SIGTERM) -> None:
        stop_process(self.process, timeout, sig)

    def kill(self) -> None:
        """SIGKILL the server and its workers (its process group: see launch) at once, and reap it."""
        if self.process is None:
            return
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()

    def wait_healthy(self, url: str, host: str, timeout: float = 30) -> None:
        """Wait until GET `url` with `host` as its Host answers 200; RuntimeError with the server's
        log if it exits or time runs out."""
        try:
            wait_until(lambda: http_status(url, host=host) == 200, self.process, timeout, self.name)
        except RuntimeError as error:
            raise RuntimeError(f"{error}: {self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
