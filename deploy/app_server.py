"""The app server of every production unit: uWSGI on the unit's unix socket, its settings from the environment.

Chosen by measurement (BENCHMARKS.md, `make bench-stack`): behind nginx on `uwsgi_pass` it costs
about a quarter less CPU per request than gunicorn's gthread workers, with the database 0.1, 1 and
5 ms away. One process per core, each with APP_THREADS threads to wait out database round trips.
"""

import os
from pathlib import Path

from deploy.processes import BIN

# What each setting is, and its default: every one can be set in the unit's environment.
SETTINGS = {
    "APP_PROCESSES": str(os.cpu_count() or 1),  # worker processes: one per core
    "APP_THREADS": "4",  # threads per process (8 measured better with the database ~5 ms away)
    "APP_TIMEOUT": "30",  # seconds a request may run before its worker is replaced (harakiri)
    # Requests before a worker is recycled; 0, the default: never. Each worker that exits leaves its
    # metric files, which /metrics keeps summing until the server restarts (README, Metrics).
    "APP_MAX_REQUESTS": "0",
}


def setting(env: dict, name: str) -> int:
    value = env.get(name) or SETTINGS[name]
    try:
        return int(value)
    except ValueError:
        raise SystemExit(f"{name} must be a whole number, not {value!r}") from None


def uwsgi_command(
    env: dict,
    module: str = "plantstore_site.wsgi:application",
    bin_dir: Path = BIN,
    processes: int | None = None,
    threads: int | None = None,
) -> list[str]:
    """uWSGI (from the venv `bin_dir`) serving `module` on `{socket}` (filled in by the unit), as production
    runs it: with APP_PROCESSES × APP_THREADS unless `processes` and `threads` say otherwise."""
    as_root = os.geteuid() == 0
    return [
        str(bin_dir / "uwsgi"),
        "--master",
        "--strict",  # an unknown option is an error, not a warning
        "--need-app",  # a broken app stops it at start instead of answering 500s
        "--module",
        module,
        "--uwsgi-socket",
        "{socket}",
        # Only nginx's workers may connect: the uwsgi protocol carries REMOTE_ADDR, which the admin's
        # login lockout trusts. As root those workers run as nobody (deploy/nginx.conf).
        "--chmod-socket=600",
        *(["--chown-socket=nobody:nogroup"] if as_root else []),
        f"--processes={processes or setting(env, 'APP_PROCESSES')}",
        f"--threads={threads or setting(env, 'APP_THREADS')}",
        "--enable-threads",
        "--single-interpreter",
        "--thunder-lock",  # one worker at a time accepts: no thundering herd
        f"--harakiri={setting(env, 'APP_TIMEOUT')}",
        f"--max-requests={setting(env, 'APP_MAX_REQUESTS')}",
        # The app writes one log line per request (plants.requests); uWSGI's own would be a second.
        "--disable-logging",
        # nginx passes header sections up to 32 KiB (large_client_header_buffers 4 8k).
        "--buffer-size=32768",
        # SIGTERM: finish the requests in flight, then exit (uWSGI 2.0 would reload on it).
        "--hook-master-start=unix_signal:15 gracefully_kill_them_all",
        # SIGHUP (the unit's reload) re-executes uWSGI: with the venv's python, or it leaves the venv.
        f"--binary-path={bin_dir / 'python'}",
        "--vacuum",
    ]
