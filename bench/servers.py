"""The servers `make bench` runs beside gunicorn: the FastAPI peer's uvicorn, granian for the
service, and nginx in front of the service and of the peer (deploy/nginx.conf, as make serve runs it)."""

import os
import shutil
import sys
from pathlib import Path

from deploy.serve import nginx_command, nginx_run_dir, render_nginx_conf
from tests.live import ROOT, LiveGunicorn, LiveServer

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
PEER_WORKERS = 2
GRANIAN_WORKERS, GRANIAN_THREADS = 2, 4


def uvicorn_peer(log_dir: Path, socket_path: Path | None = None) -> LiveServer:
    """The FastAPI peer under uvicorn with uvloop and httptools (uvicorn[standard]'s choices), its
    access log on: one line per request, as the service writes its request log. On a loopback
    port, or on `socket_path` (a unix socket, for nginx in front)."""
    listen = ["--uds", str(socket_path)] if socket_path else ["--port", "{port}"]
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", *listen]
    command += ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
    return LiveServer("uvicorn", command, log_dir)


def granian_service(log_dir: Path, socket_path: Path | None = None, **env: str) -> LiveServer:
    """The service's WSGI application (bench.wsgi) under granian, a Rust HTTP server: measured beside
    gunicorn, which production runs (README, Deploying with gunicorn and PostgreSQL). On a loopback
    port, or on `socket_path`."""
    granian = str(Path(sys.executable).parent / "granian")
    listen = ["--uds", str(socket_path), "--uds-permissions", "0o666"] if socket_path else ["--port", "{port}"]
    command = [granian, "--interface", "wsgi", "--host", "127.0.0.1", *listen, "--no-ws"]
    command += ["--workers", str(GRANIAN_WORKERS), "--blocking-threads", str(GRANIAN_THREADS), "bench.wsgi:application"]
    return LiveServer("granian", command, log_dir, **env)


class BehindNginx(LiveServer):
    """nginx on a loopback port with deploy/nginx.conf, in front of an app server listening on a unix
    socket in nginx's folder: `make serve`'s path. `app(socket_path)` makes the app server."""

    def __init__(self, name: str, app, log_dir: Path):
        self.run_dir = nginx_run_dir(f"bench-{name}.")
        socket_path = self.run_dir / "app.sock"
        self.app: LiveServer = app(socket_path)
        super().__init__(name, nginx_command(self.run_dir, self.run_dir / "nginx.conf"), log_dir)
        render_nginx_conf(self.run_dir, socket_path, f"127.0.0.1:{self.port}")

    def launch(self) -> None:
        # The app first: nginx answers /healthz with 503 until the app does (LiveServer.start waits).
        self.app.launch()
        super().launch()

    def log(self) -> str:
        return f"{super().log()}\n{self.app.name}: {self.app.log()}"

    def pids(self) -> list[int]:
        return [self.process.pid, self.app.process.pid]

    def worker_pids(self) -> list[int]:
        return self.app.worker_pids()

    def stop(self) -> None:
        super().stop()
        self.app.stop()
        shutil.rmtree(self.run_dir, ignore_errors=True)


def gunicorn_behind_nginx(log_dir: Path, **env: str) -> BehindNginx:
    """The service as `make serve` runs it: gunicorn (gunicorn.conf.py) on a unix socket, nginx in front."""
    return BehindNginx(
        "nginx-gunicorn",
        lambda path: LiveGunicorn(log_dir, app="bench.wsgi", GUNICORN_BIND=f"unix:{path}", **env),
        log_dir,
    )


def granian_behind_nginx(log_dir: Path, **env: str) -> BehindNginx:
    """The service under granian, on a unix socket behind nginx: what replacing gunicorn would buy."""
    return BehindNginx("nginx-granian", lambda path: granian_service(log_dir, path, **env), log_dir)


def uvicorn_behind_nginx(log_dir: Path) -> BehindNginx:
    """The FastAPI peer behind the same nginx, on a unix socket as the service is."""
    return BehindNginx("nginx-uvicorn", lambda path: uvicorn_peer(log_dir, path), log_dir)
