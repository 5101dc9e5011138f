"""The app servers `make bench-stack` puts behind nginx, each in a production unit (deploy/unit.py):
Granian as production runs it (deploy/app_server.py, nginx's upstream keep-alive), and the
alternatives measured against it: uWSGI on `uwsgi_pass` (`make serve`'s until issue 26; it closes
its connection after each answer), gunicorn over HTTP with or without nginx's upstream keep-alive
(deploy.unit.http_upstream).
"""

from pathlib import Path

from bench.servers import gunicorn_command, unit, uwsgi_command, uwsgi_location
from deploy.app_server import granian_command
from deploy.unit import http_upstream


def stack_unit(name: str, kind: str, processes: int, threads: int, keepalive: bool, log_dir: Path, **env: str):
    """One variant: `kind` (granian, uwsgi, gunicorn-gthread, gunicorn-sync) with `processes` × `threads`."""
    if kind == "granian":  # production's command; its keep-alive is production's too
        settings = {**env, "APP_PROCESSES": str(processes), "APP_THREADS": str(threads)}
        return unit(name, log_dir, granian_command(settings, "bench.wsgi:application"), **settings)
    if kind == "uwsgi":
        return unit(name, log_dir, uwsgi_command(processes, threads), uwsgi_location, **env)
    command = gunicorn_command(processes, threads, kind.removeprefix("gunicorn-"))
    return unit(name, log_dir, command, http_upstream(keepalive), **env)
