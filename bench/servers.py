"""The servers `make bench` runs beside gunicorn: the FastAPI peer's uvicorn, and granian for the service."""

import os
import subprocess
import sys
from pathlib import Path

from tests.live import ROOT, free_port, stop_process, wait_until_healthy

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
PEER_WORKERS = 2
GRANIAN_WORKERS, GRANIAN_THREADS = 2, 4


class LiveServer:
    """A server process on a free loopback port, its output in `log_dir`, ready once /healthz answers 200."""

    def __init__(self, name: str, command: list[str], log_dir: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.command = [part.format(port=self.port) for part in command]
        self.log_path = log_dir / f"{name}-{self.port}.log"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen | None = None

    def start(self) -> "LiveServer":
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(self.command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if not wait_until_healthy(self.url, self.process, timeout=30):
            self.stop()
            raise RuntimeError(f"{self.command[0]}'s /healthz did not answer 200: {self.log_path.read_text()}")
        return self

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        # multiprocessing's resource tracker is a child too; the workers are the others.
        return [int(pid) for pid in children if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def stop(self) -> None:
        stop_process(self.process)


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
