"""The topologies the README offers, started for the tests with the same cases: `make serve`,
`make cluster` (localcluster/cluster.py), and `make serve` behind a TLS-terminating proxy."""

import http.client
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.core.management import call_command

from deploy.processes import ROOT, wait_until
from localcluster.cluster import Cluster
from localcluster.processes import ServerProcess, free_port
from tests.live import (
    PUBLIC_HOST,
    TLS_PROXY_ADDRESS,
    MakeServe,
    ProxiedConnection,
    PublicHostTlsConnection,
    live_cluster,
)

VENV = Path(sys.executable).parent.parent
# The topologies as parameters of a module's fixture: make cluster runs on the test database
# (pytest-django sets it up only for tests marked as using it), make serve and the TLS proxy's
# make serve on a SQLite file of their own, whatever the run's database.
CLUSTER = pytest.param("cluster", marks=[pytest.mark.postgres, pytest.mark.django_db])
SERVE = pytest.param("serve", marks=pytest.mark.own_database)
TLS = pytest.param("tls", marks=pytest.mark.own_database)

TLS_PROXY_CONFIG = """\
global
    maxconn 256
defaults
    mode http
    timeout connect 2s
    timeout client 30s
    timeout http-request 10s
    timeout server 35s
frontend tls
    bind 127.0.0.1:{port} ssl crt {pem}
    # Appends the client's address to whatever X-Forwarded-For the client sent.
    option forwardfor
    http-request set-header X-Forwarded-Proto https
    default_backend serve
backend serve
    server serve 127.0.0.1:{upstream} source {source}
"""


class TlsProxy:
    """HAProxy terminating TLS (a throwaway self-signed certificate for 127.0.0.1) in front of
    `make serve` on `upstream`, connecting to it from TLS_PROXY_ADDRESS, as docs/deploying.md says."""

    def __init__(self, upstream: int):
        self.port = free_port()
        self.url = f"https://127.0.0.1:{self.port}"
        self.work_dir = work_dir = Path(tempfile.mkdtemp(prefix="plantstore-tls."))
        self.certificate = work_dir / "certificate.pem"
        key = work_dir / "key.pem"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
            + ["-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(self.certificate)],
            check=True,
            capture_output=True,
        )
        pem = work_dir / "proxy.pem"
        pem.write_bytes(self.certificate.read_bytes() + key.read_bytes())
        config = work_dir / "haproxy.cfg"
        config.write_text(TLS_PROXY_CONFIG.format(port=self.port, pem=pem, upstream=upstream, source=TLS_PROXY_ADDRESS))
        binary = shutil.which("haproxy") or "/usr/sbin/haproxy"
        self.server = ServerProcess("tls", [binary, "-db", "-f", str(config)], dict(os.environ), work_dir / "log")
        self.ssl_context = ssl.create_default_context(cafile=str(self.certificate))

    def answers(self) -> bool:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=2, context=self.ssl_context)
        try:
            connection.request("GET", "/healthz", headers={"Host": PUBLIC_HOST})
            return connection.getresponse().status == 200
        except (OSError, http.client.HTTPException):
            return False
        finally:
            connection.close()

    def start(self) -> "TlsProxy":
        self.server.launch()
        try:
            wait_until(self.answers, self.server.process, 30, "the TLS proxy")
        except RuntimeError as error:
            self.stop()
            raise RuntimeError(f"{error}: {self.server.log()}") from None
        return self

    def stop(self) -> None:
        self.server.stop()
        shutil.rmtree(self.work_dir, ignore_errors=True)


class Topology:
    """What a test needs of a running topology: where clients connect, a token, the app's log
    (every app server's, nginx's edge lines included), its app server workers, and manage.py."""

    def __init__(self, name: str, port: int, env: dict, logs, workers, ssl_context: ssl.SSLContext | None = None):
        self.name, self.port, self.env, self.ssl_context = name, port, env, ssl_context
        self.url = f"{'https' if ssl_context else 'http'}://127.0.0.1:{port}"
        self._logs, self._workers = logs, workers
        self.token = self.manage("token", "issue", "edge-client")

    def manage(self, *args: str, **env: str) -> str:
        """manage.py with the topology's settings and database; its standard output."""
        command = [sys.executable, "manage.py", *args]
        done = subprocess.run(command, cwd=ROOT, env={**self.env, **env}, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"manage.py {args[0]} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        return done.stdout.strip()

    def connection(self, source: str = "127.0.0.1", timeout: float = 10) -> http.client.HTTPConnection:
        """A client at the loopback address `source` sending requests to the public host name: through
        the TLS proxy, or, where the topology has none, as the TLS proxy sends them on."""
        if self.ssl_context:
            return PublicHostTlsConnection(
                "127.0.0.1", self.port, timeout=timeout, source_address=(source, 0), context=self.ssl_context
            )
        return ProxiedConnection(self.port, client=source, timeout=timeout)

    def log(self) -> str:
        """Every log's complete lines. A reader can find a line still being written cut short (a write
        reaches the file a page at a time for a reader), and the next log's first line run into it: so a
        line without its newline yet is left for the next read."""
        return "".join(text[: text.rfind("\n") + 1] for text in self._logs())

    def workers(self) -> list[int]:
        return self._workers()


def topology_of_served(served: MakeServe, name: str = "serve", proxy: TlsProxy | None = None) -> Topology:
    port, context = (proxy.port, proxy.ssl_context) if proxy else (served.port, None)
    return Topology(name, port, served.env, lambda: [served.log()], served.app_workers, context)


def topology_of_cluster(cluster: Cluster) -> Topology:
    return Topology(
        "cluster",
        cluster.front.port,
        cluster.units[0].env,
        lambda: [cluster.front.log(), *(unit.log() for unit in cluster.units)],
        lambda: [pid for unit in cluster.units for pid in unit.worker_pids()],
    )


@contextmanager
def running_cluster(settings_dict: dict, work_dir: Path, django_db_blocker, **env: str) -> Iterator[Cluster]:
    """make cluster's topology on the test database, its static files collected as `python -m localcluster`
    collects them (the admin's pages need them); stopped after, and the plants, tokens and users it
    stored flushed, so the next module starts empty."""
    (work_dir / "cluster").mkdir()
    cluster = live_cluster(
        settings_dict, work_dir / "cluster", DJANGO_STATIC_ROOT=str(work_dir / "cluster" / "static"), **env
    )
    subprocess.run(
        [sys.executable, "manage.py", "collectstatic", "--no-input", "-v", "0"], cwd=ROOT, env=cluster.env, check=True
    )
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        with django_db_blocker.unblock():
            call_command("flush", interactive=False)
