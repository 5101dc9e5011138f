"""The app servers `make bench-stack` puts behind nginx, each in a production unit (deploy/unit.py):
uWSGI as production runs it (deploy/app_server.py, `uwsgi_pass`), and the alternatives measured
against it, gunicorn and granian over HTTP (deploy.unit.http_upstream), with or without nginx's
upstream keep-alive. uWSGI closes its connection after each answer: no keep-alive on `uwsgi_pass`.
"""

from pathlib import Path

from bench.servers import granian_command, gunicorn_command, unit
from deploy.app_server import uwsgi_command
from deploy.unit import http_upstream


def stack_unit(name: str, kind: str, processes: int, threads: int, keepalive: bool, log_dir: Path, **env: str):
    """One variant: `kind` (uwsgi, gunicorn-gthread, gunicorn-sync, granian) with `processes` × `threads`."""
    if kind == "uwsgi":
        settings = {**env, "APP_PROCESSES": str(processes), "APP_THREADS": str(threads)}
        return unit(name, log_dir, uwsgi_command(settings, "bench.wsgi:application"), **settings)
    if kind.startswith("gunicorn"):
        command = gunicorn_command(processes, threads, kind.removeprefix("gunicorn-"))
    else:
        command = granian_command(processes, threads)
    return unit(name, log_dir, command, http_upstream(keepalive), **env)
