"""The servers `make bench` runs, every one a production unit (deploy/unit.py: nginx in front of an
app server on a unix socket): the service as `make serve` runs it, and the peers behind the same nginx."""

import os
from pathlib import Path

from deploy.app_server import granian_command
from deploy.processes import ROOT
from localcluster.processes import LocalUnit, free_port

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"
PEER_WORKERS = 2


def serving(module: str, env: dict, bin_dir: Path | None = None) -> list[str]:
    """Granian as production runs it (deploy/app_server.py), serving `module`, from `bin_dir`'s venv if given."""
    program, *options, _ = granian_command(env)
    return [str(bin_dir / "granian") if bin_dir else program, *options, module]


def unit(name: str, log_dir: Path, app_command: list[str] | None = None, **env: str) -> LocalUnit:
    """A unit on a free loopback port, its log in `log_dir`; Granian as production runs it unless `app_command`."""
    port = free_port()
    settings = {**os.environ, **env}
    command = app_command or serving("bench.wsgi:application", settings)
    return LocalUnit(f"127.0.0.1:{port}", settings, command, log_dir / f"{name}-{port}.log", name=name)


def service(log_dir: Path, **env: str) -> LocalUnit:
    """The service as `make serve` runs it, serving bench.wsgi (the service plus the bare view's URL)."""
    return unit("service", log_dir, **env)


def django_peer(peer: str, log_dir: Path, equal_work: bool = False, **env: str) -> LocalUnit:
    """A Django peer (bench/peers/<peer>_peer) under the service's app server and settings, from its own
    venv; with `equal_work`, its variant that also counts and logs each request (PEER_EQUAL_WORK=1),
    named `<peer>+`."""
    settings = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": f"bench.peers.{peer}_peer.settings"}
    settings["PEER_EQUAL_WORK"] = "1" if equal_work else ""
    command = serving(f"bench.peers.{peer}_peer.wsgi:application", settings, DJANGO_PEERS_BIN)
    return unit(f"{peer}+" if equal_work else peer, log_dir, command, **settings)


def fastapi_peer(log_dir: Path, equal_work: bool = False) -> LocalUnit:
    """The FastAPI peer under uvicorn (uvloop, httptools, access log on), behind nginx with upstream
    keep-alive, its idle timeout above nginx's. With `equal_work`, its variant that also counts and
    logs each request (PEER_EQUAL_WORK=1), named `fastapi+`: its JSON line replaces uvicorn's access log."""
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--uds", "{socket}"]
    command += ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
    command += ["--timeout-keep-alive", "5", "--no-access-log" if equal_work else "--access-log"]
    name, env = ("fastapi+", {"PEER_EQUAL_WORK": "1"}) if equal_work else ("fastapi", {"PEER_EQUAL_WORK": ""})
    return unit(name, log_dir, command, **env)
