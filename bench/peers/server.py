"""The FastAPI peer's server for `make bench`: uvicorn, 2 workers, in the peers' own venv."""

import os
import signal
import subprocess
from pathlib import Path

from tests.live import ROOT, free_port, wait_until_healthy

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
WORKERS = 2


class LiveUvicorn:
    """`uvicorn bench.peers.fastapi_app:app` with uvloop and httptools (uvicorn[standard]'s
    choices) and its access log on, one line per request as the service's request log."""

    def __init__(self, log_dir: Path, **env: str):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_dir / f"uvicorn-{self.port}.log"
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen | None = None

    def start(self) -> "LiveUvicorn":
        command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--port", str(self.port)]
        command += ["--workers", str(WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
        # uvicorn's access log is an INFO line on its own logger: keep it, as the service keeps its own.
        command += ["--access-log"]
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(command, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        if not wait_until_healthy(self.url, self.process, timeout=30):
            raise RuntimeError(f"uvicorn's /healthz did not answer 200: {self.log_path.read_text()}")
        return self

    def worker_pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        # multiprocessing's resource tracker is a child too; the workers are the spawned mains.
        return [int(pid) for pid in children if b"resource_tracker" not in Path(f"/proc/{pid}/cmdline").read_bytes()]

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
