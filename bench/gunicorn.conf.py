"""gunicorn settings for the bench's gunicorn rows (a measured alternative; production runs Granian: deploy/app_server.py)."""

import multiprocessing
import os
import shutil
import tempfile
from pathlib import Path

bind = os.environ.get("GUNICORN_BIND", f"127.0.0.1:{os.environ.get('PORT', '8000')}")
# One process per core, each with 4 threads to hide the database round trips: 1.12-1.18x the
# requests/s of 2 x cores + 1 processes of 2 threads on 2 cores, with fewer processes' memory
# (make bench, BENCHMARKS.md).
workers = int(os.environ.get("GUNICORN_WORKERS", multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", 4))
worker_class = os.environ.get("GUNICORN_WORKER_CLASS", "gthread")
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 30))
graceful_timeout = 30
keepalive = 5
# Recycle workers now and then so a slow leak can never grow without bound.
max_requests = int(os.environ.get("GUNICORN_MAX_REQUESTS", 20000))
max_requests_jitter = 2000
# No access log: the app logs one JSON line per request (plants.requests), with the client's
# path JSON-escaped; gunicorn's would log each request twice, its path unescaped.
accesslog = None
errorlog = "-"
loglevel = os.environ.get("GUNICORN_LOG_LEVEL", "info")
forwarded_allow_ips = os.environ.get("GUNICORN_FORWARDED_ALLOW_IPS", "127.0.0.1")
# No control socket: it defaults to one path in $HOME, which several servers on a host would share.
control_socket_disable = True
# Limits on the request line and headers; the body cap is the app's (PLANTS_MAX_BODY_BYTES).
limit_request_line = 4094
limit_request_fields = 50

# Metrics (prometheus-client's multiprocess mode): each worker writes its samples to files in one
# folder per server, and /metrics sums them. The folder must start empty, or a restarted server
# would go on from its last run's counts; without PROMETHEUS_MULTIPROC_DIR this server makes its own.
_own_metrics_dir = not os.environ.get("PROMETHEUS_MULTIPROC_DIR")
if _own_metrics_dir:
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="plantstore-metrics.")


def on_starting(server):
    metrics_dir = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
    metrics_dir.mkdir(parents=True, exist_ok=True)
    for stale in metrics_dir.glob("*.db"):
        stale.unlink()


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)  # a dead worker's counts stay; only its live gauges go


def on_exit(server):
    if _own_metrics_dir:
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
