"""The servers `make bench` runs beside the service: each a production unit (deploy/unit.py: nginx in
front of an app server on a unix socket), or the app server alone on a loopback port (direct)."""

import os
from pathlib import Path

from deploy.processes import BIN, ROOT, ServerProcess, free_port, http_status, wait_until
from deploy.unit import Unit, gunicorn_command

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
PEER_WORKERS = 2
GRANIAN_WORKERS, GRANIAN_THREADS = 2, 4


class Direct(ServerProcess):
    """An app server alone on a free loopback port (`{port}` in its command), its output in a log in
    `log_dir`: what a server costs without nginx in front."""

    def __init__(self, name: str, command: list[str], log_dir: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        command = [part.format(port=self.port) for part in command]
        super().__init__(name, command, {**os.environ, **env}, log_dir / f"{name}-{self.port}.log")

    def start(self) -> "Direct":
        self.launch()
        try:
            wait_until(lambda: http_status(f"{self.url}/healthz") == 200, self.process, 30, self.name)
        except BaseException:
            self.stop()
            raise
        return self

    def pids(self) -> list[int]:
        return [self.process.pid]

    def worker_pids(self) -> list[int]:
        return Unit.worker_pids(self)  # the same rule: the children that are not a resource tracker

    @property
    def app(self) -> "Direct":
        return self


def in_unit(name: str, app_command: list[str], log_dir: Path, **env: str) -> Unit:
    """`app_command` (naming its unix socket as `{socket}`) behind nginx, as `make serve` runs the service."""
    port = free_port()
    return Unit(f"127.0.0.1:{port}", {**os.environ, **env}, app_command, log_dir / f"{name}-{port}.log", name=name)


def uvicorn_command(listen: list[str]) -> list[str]:
    """The FastAPI peer under uvicorn with uvloop and httptools (uvicorn[standard]'s choices), its
    access log on: one line per request, as the service writes its request log."""
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", *listen]
    return command + ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]


def granian_command(listen: list[str]) -> list[str]:
    """The service's WSGI application (bench.wsgi) under granian, a Rust HTTP server."""
    command = [str(BIN / "granian"), "--interface", "wsgi", "--host", "127.0.0.1", *listen, "--no-ws"]
    return command + [
        "--workers",
        str(GRANIAN_WORKERS),
        "--blocking-threads",
        str(GRANIAN_THREADS),
        "bench.wsgi:application",
    ]


def gunicorn_direct(log_dir: Path, **env: str) -> Direct:
    """The service's gunicorn alone on a loopback port (gunicorn.conf.py, bench.wsgi)."""
    server = Direct("gunicorn", gunicorn_command("bench.wsgi"), log_dir, **env)
    server.env["GUNICORN_BIND"] = f"127.0.0.1:{server.port}"
    return server


def uvicorn_peer(log_dir: Path) -> Direct:
    return Direct("uvicorn", uvicorn_command(["--port", "{port}"]), log_dir)


def granian_service(log_dir: Path, **env: str) -> Direct:
    return Direct("granian", granian_command(["--port", "{port}"]), log_dir, **env)


def gunicorn_behind_nginx(log_dir: Path, **env: str) -> Unit:
    """The service as `make serve` runs it (bench.wsgi: the service plus the bare view's URL)."""
    return in_unit("nginx-gunicorn", gunicorn_command("bench.wsgi"), log_dir, **env)


def granian_behind_nginx(log_dir: Path, **env: str) -> Unit:
    """The service under granian, on a unix socket behind nginx: what replacing gunicorn would buy."""
    listen = ["--uds", "{socket}", "--uds-permissions", "0o666"]
    return in_unit("nginx-granian", granian_command(listen), log_dir, **env)


def uvicorn_behind_nginx(log_dir: Path) -> Unit:
    """The FastAPI peer behind the same nginx, on a unix socket as the service is."""
    return in_unit("nginx-uvicorn", uvicorn_command(["--uds", "{socket}"]), log_dir)
