"""The servers `make bench` runs beside gunicorn: the FastAPI peer's uvicorn, and granian for the service."""

import os
import sys
from pathlib import Path

from tests.live import ROOT, LiveServer

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
PEER_WORKERS = 2
GRANIAN_WORKERS, GRANIAN_THREADS = 2, 4


def uvicorn_peer(log_dir: Path) -> LiveServer:
    """The FastAPI peer under uvicorn with uvloop and httptools (uvicorn[standard]'s choices), its
    access log on: one line per request, as the service writes its request log."""
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--port", "{port}"]
    command += ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
    return LiveServer("uvicorn", command, log_dir)


def granian_service(log_dir: Path, **env: str) -> LiveServer:
    """The service's WSGI application (bench.wsgi) under granian, a Rust HTTP server: measured beside
    gunicorn, which production runs (README, Deploying with gunicorn and PostgreSQL)."""
    granian = str(Path(sys.executable).parent / "granian")
    command = [granian, "--interface", "wsgi", "--host", "127.0.0.1", "--port", "{port}", "--no-ws"]
    command += ["--workers", str(GRANIAN_WORKERS), "--blocking-threads", str(GRANIAN_THREADS), "bench.wsgi:application"]
    return LiveServer("granian", command, log_dir, **env)
