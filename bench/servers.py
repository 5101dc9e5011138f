"""The servers `make bench` runs, every one a production unit (deploy/unit.py: nginx in front of an
app server on a unix socket): the service as `make serve` runs it, and the peers behind the same nginx.

Each starts from a cleared environment, as a service manager starts a unit (CLEAN_ENV), plus the
settings the bench gives it: nothing of the shell that ran the bench reaches a target."""

import os
from pathlib import Path

from deploy.app_server import granian_command
from deploy.processes import ROOT
from localcluster.processes import LocalUnit, free_port

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"
PEER_WORKERS = 2
# systemd's environment for a unit: its default PATH, the system's locale.
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8"}


def serving(module: str, env: dict, bin_dir: Path | None = None) -> list[str]:
    """Granian as production runs it (deploy/app_server.py), serving `module`, from `bin_dir`'s venv if given."""
    program, *options, _ = granian_command(env)
    return [str(bin_dir / "granian") if bin_dir else program, *options, module]


def unit(name: str, log_dir: Path, app_command: list[str] | None = None, **env: str) -> LocalUnit:
    """A unit on a free loopback port with `env` alone (on CLEAN_ENV), its log in `log_dir`; Granian as
    production runs it unless `app_command`."""
    port = free_port()
    settings = {**CLEAN_ENV, **env}
    command = app_command or serving("bench.wsgi:application", settings)
    return LocalUnit(f"127.0.0.1:{port}", settings, command, log_dir / f"{name}-{port}.log", name=name)


def service(log_dir: Path, **env: str) -> LocalUnit:
    """The service as `make serve` runs it, serving bench.wsgi (the service plus the bare view's URL)."""
    return unit("service", log_dir, **env)


def django_peer(peer: str, log_dir: Path, equal_work: bool = False, **env: str) -> LocalUnit:
    """A Django peer (bench/peers/<peer>_peer) under the service's app server and settings, from its own
    venv; with `equal_work`, its variant that also counts and logs each request (PEER_EQUAL_WORK=1),
    named `<peer>+`."""
    settings = {**env, "DJANGO_SETTINGS_MODULE": f"bench.peers.{peer}_peer.settings"}
    settings["PEER_EQUAL_WORK"] = "1" if equal_work else ""
    command = serving(f"bench.peers.{peer}_peer.wsgi:application", settings, DJANGO_PEERS_BIN)
    return unit(f"{peer}+" if equal_work else peer, log_dir, command, **settings)


def fastapi_peer(log_dir: Path, database_url: str, equal_work: bool = False) -> LocalUnit:
    """The FastAPI peer under uvicorn (uvloop, httptools), behind nginx with upstream keep-alive, its idle
    timeout above nginx's; uvicorn's access log off, as the service's app server's is (the Django peers
    log no request either). With `equal_work`, its variant that also counts and logs each request
    (PEER_EQUAL_WORK=1, one JSON line as the service's), named `fastapi+`."""
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--uds", "{socket}"]
    command += ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
    command += ["--timeout-keep-alive", "5", "--no-access-log"]
    name = "fastapi+" if equal_work else "fastapi"
    return unit(name, log_dir, command, DATABASE_URL=database_url, PEER_EQUAL_WORK="1" if equal_work else "")
