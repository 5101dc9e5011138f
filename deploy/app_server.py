"""The app server of every production unit: Granian (WSGI) on the unit's unix socket, its settings from the unit.

Granian is actively maintained (uWSGI, which ran here before it, is in maintenance mode) and was
measured against it behind the same nginx (docs/decisions/app-server.md). nginx speaks HTTP/1.1
to it and keeps idle connections open for the next requests (deploy/nginx.conf). One process per
core, each with APP_THREADS threads to wait out database round trips.

The unit starts it, and stops it with SIGTERM: it finishes the requests in flight, then exits. A
reload is a new Granian on a new socket, not Granian's own SIGHUP (deploy/unit.py: Unit.reload says
why). A worker that dies is started again.
"""

import os
from pathlib import Path

from deploy.processes import BIN

# What each setting is, and its default: every one can be set in the unit's environment.
SETTINGS = {
    "APP_PROCESSES": str(os.cpu_count() or 1),  # worker processes: one per core
    "APP_THREADS": "4",  # threads per process running the app (8 measured better with the database ~5 ms away)
}
# Settings the unit gives the app unless its environment says otherwise. The scheme the client used:
# nginx always sets X-Forwarded-Proto (deploy/nginx.conf: a trusted proxy's, else its own scheme)
# and only nginx reaches the app's socket, so Django believes it (uWSGI took wsgi.url_scheme from
# that header itself; Granian says "http", the socket's).
APP_ENVIRONMENT = {"DJANGO_SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}
# How long Granian keeps an idle HTTP/1 connection open between two requests: its header read
# timeout, which also runs while a kept-alive connection waits for its next request (measured:
# an idle connection is closed after exactly this long). Above nginx's idle timeout on its upstream
# connections (deploy/unit.py: UPSTREAM_IDLE_S), so nginx always closes first
# (tests/test_upstream_keepalive.py).
KEEP_ALIVE_IDLE_S = 30
# The connections each worker serves at once (Granian's --backpressure): an idle kept-alive
# connection holds one of them, so this stays well above the idle connections nginx keeps
# (deploy/nginx.conf: `keepalive`), or a worker would stop taking nginx's new connections while
# nginx keeps the old ones idle (tests/test_upstream_keepalive.py). Requests above APP_THREADS
# wait inside the worker for a thread.
BACKPRESSURE = 128
# Seconds a worker has to finish its requests when stopped (SIGTERM) before it is killed:
# under the unit's own 40 s (deploy/unit.py: Unit.stop), above nginx's 30 s wait for an answer.
WORKER_STOP_S = 35


def setting(env: dict, name: str) -> int:
    value = env.get(name) or SETTINGS[name]
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {value!r}") from None


def granian_command(
    env: dict,
    module: str = "plantstore_site.wsgi:application",
    workers: int | None = None,
    threads: int | None = None,
    bin_dir: Path = BIN,
) -> list[str]:
    """Granian (from the venv `bin_dir`) serving `module` on `{socket}` (filled in by the unit), as
    production runs it: `workers` processes of `threads` threads, else APP_PROCESSES and APP_THREADS."""
    workers = workers or setting(env, "APP_PROCESSES")
    threads = threads or setting(env, "APP_THREADS")
    return [
        str(bin_dir / "granian"),
        "--interface=wsgi",
        "--http=1",  # nginx speaks HTTP/1.1 to it
        "--no-ws",
        "--uds={socket}",
        # Only its owner may connect; the unit gives the socket to nginx's workers (deploy/unit.py).
        "--uds-permissions=0o600",
        f"--workers={workers}",
        f"--blocking-threads={threads}",
        f"--backpressure={BACKPRESSURE}",
        f"--http1-header-read-timeout={KEEP_ALIVE_IDLE_S * 1000}",
        "--respawn-failed-workers",
        f"--workers-kill-timeout={WORKER_STOP_S}",
        # The app writes one log line per request (plants.requests); Granian's access log would be a second.
        "--no-access-log",
        module,
    ]
