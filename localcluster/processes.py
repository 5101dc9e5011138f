"""What make cluster, the tests and the bench need beside deploy/'s production unit: free ports,
process trees, servers' logs, and a unit they can observe and kill as a host dying would."""

import os
import random
import shutil
import socket
from pathlib import Path

from deploy import processes
from deploy.processes import children, http_status, wait_until
from deploy.unit import Unit

EPHEMERAL_PORTS = Path("/proc/sys/net/ipv4/ip_local_port_range")
LOWEST_PORT = 10000
_given_ports: set[int] = set()


def port_range() -> range:
    """The ports this process may give: those below the kernel's ephemeral range, cut into one share
    for each of pytest-xdist's workers (a worker's subprocesses inherit its share), so that two
    workers never give the same port. Each probes a port free, and a server takes it later: a port
    probed free by one worker while another's server was starting on it was taken twice (HAProxy:
    "Address already in use" for a failover cluster's metrics port)."""
    try:
        highest = int(EPHEMERAL_PORTS.read_text().split()[0]) - 1
    except (OSError, ValueError, IndexError):
        highest = 32767
    highest = max(highest, LOWEST_PORT + 1000)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    shares = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    # A worker pytest-xdist starts in place of a crashed one is numbered on (gw3 of 3): it shares.
    share = int(worker.removeprefix("gw")) % shares if worker.startswith("gw") else 0
    width = (highest + 1 - LOWEST_PORT) // shares
    start = LOWEST_PORT + share * width
    return range(start, start + width)


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on, for a server about to start, chosen below the kernel's ephemeral
    range: the kernel gives the source ports of outgoing connections from that range, and one given
    between this choice and the server's bind makes the bind fail (seen when load tests ran beside
    other servers' starts). Never the same port twice in one process, nor in two of pytest's
    workers (`port_range`)."""
    ports = port_range()
    for _ in range(200):
        port = random.choice(ports)
        if port in _given_ports:
            continue
        with socket.socket() as probe:
            try:
                probe.bind((host, port))
            except OSError:
                continue
        _given_ports.add(port)
        return port
    raise RuntimeError(f"no free port on {host} in {ports}")


def accepts_connections(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on `port`: a TCP connection opens (and is closed at once)."""
    try:
        socket.create_connection((host, port), timeout=0.5).close()
        return True
    except OSError:
        return False


def command_line(pid: int) -> bytes:
    """A process's command line (arguments joined by NUL bytes), or b"" once it has exited: a process
    found among another's children may be gone by the time it is read."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def descendants(pid: int) -> list[int]:
    """Every process `pid` started, however deep, that is still there: parents before their children."""
    found, pending = [], children(pid)
    while pending:
        child = pending.pop(0)
        found.append(child)
        pending.extend(children(child))
    return found


class ServerProcess(processes.ServerProcess):
    """A server process whose log can be read, and waited for until it answers."""

    def wait_healthy(self, url: str, host: str, timeout: float = 30) -> None:
        """Wait until GET `url` with `host` as its Host answers 200; RuntimeError with the server's
        log if it exits or time runs out."""
        try:
            wait_until(lambda: http_status(url, host=host) == 200, self.process, timeout, self.name)
        except RuntimeError as error:
            raise RuntimeError(f"{error}: {self.log()}") from None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""


class LocalUnit(Unit):
    """A production unit with what the tests and the bench observe: its log, its processes, and
    kill(), a host dying; and, for the bench's peers, another app server (`app_command`)."""

    def __init__(self, listen: str, env: dict, app_command=None, log=None, supervised=False, name="unit"):
        super().__init__(listen, env, log, supervised, name)
        self.app_command = app_command or self.app_command

    def wait_ready(self, timeout: float = 60) -> None:
        try:
            super().wait_ready(timeout)
        except RuntimeError as error:
            raise RuntimeError(f"{error}\n{self.log()}") from None

    def kill(self) -> None:
        """SIGKILL every process of the unit at once, as a host dying would; start() brings it back."""
        for server in (self.nginx, *(app for app, *_ in self.retiring), self.app):
            if server:
                server.kill()
        self.retiring = []
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def pids(self) -> list[int]:
        """The processes whose CPU this unit's work costs (with their descendants): nginx's, the app's."""
        return [self.nginx.process.pid, self.app.process.pid]

    def worker_pids(self) -> list[int]:
        """The app server's worker processes (a resource tracker is not one)."""
        return [
            pid
            for pid in children(self.app.process.pid)
            if (cmdline := command_line(pid)) and b"resource_tracker" not in cmdline
        ]

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path and self.log_path.exists() else ""
