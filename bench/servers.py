"""The servers `make bench` runs, every one a production unit (deploy/unit.py: nginx in front of an
app server on a unix socket): the service as `make serve` runs it, and the peers behind the same nginx.

Each starts from a cleared environment, as a service manager starts a unit (CLEAN_ENV), plus the
settings the bench gives it: nothing of the shell that ran the bench reaches a target."""

import os
from pathlib import Path

from deploy.app_server import granian_command
from deploy.processes import ROOT
from localcluster.processes import LocalUnit, free_port

PEERS_BIN = Path(os.environ.get("BENCH_PEER_BIN", ROOT / ".venv" / "peers" / "bin"))  # the FastAPI peer's venv
DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"
# systemd's environment for a unit: its default PATH, the system's locale.
CLEAN_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin", "LANG": "C.UTF-8"}


def serving(module: str, env: dict, bin_dir: Path | None = None, interface: str = "wsgi") -> list[str]:
    """Granian as production runs it (deploy/app_server.py), serving `module` on `interface`, from
    `bin_dir`'s venv if given."""
    program, *options, _ = granian_command(env)
    options = [option.replace("--interface=wsgi", f"--interface={interface}") for option in options]
    return [str(bin_dir / "granian") if bin_dir else program, *options, module]


def unit(name: str, log_dir: Path, app_command: list[str] | None = None, **env: str) -> LocalUnit:
    """A unit on a free loopback port with `env` alone (on CLEAN_ENV), its log in `log_dir`; Granian as
    production runs it unless `app_command` (the service: on bench.settings, the bare view's URL added)."""
    port = free_port()
    settings = {**CLEAN_ENV, **env}
    command = app_command or granian_command(settings)
    return LocalUnit(f"127.0.0.1:{port}", settings, command, log_dir / f"{name}-{port}.log", name=name)


def peer(name: str, log_dir: Path, equal_work: bool = False, **env: str) -> LocalUnit:
    """A peer under the service's app server and settings, from its own venv: `drf` or `ninja`
    (bench/peers/settings.py, Granian's WSGI), or `fastapi` (Granian's ASGI: one blocking thread, on which
    its event loop runs, uvloop, as Granian picks it when installed). With `equal_work`, its variant that
    also counts and logs each request (PEER_EQUAL_WORK=1), named `<name>+`."""
    settings = {**env, "PEER_EQUAL_WORK": "1" if equal_work else ""}
    if name == "fastapi":
        command = serving("bench.peers.fastapi_app:app", settings | {"APP_THREADS": "1"}, PEERS_BIN, "asgi")
    else:
        settings |= {"DJANGO_SETTINGS_MODULE": "bench.peers.settings", "PEER": name}
        command = serving("bench.peers.wsgi:application", settings, DJANGO_PEERS_BIN)
    return unit(f"{name}+" if equal_work else name, log_dir, command, **settings)
