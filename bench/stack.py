"""The app servers `make bench-stack` puts behind nginx, each in a production unit (deploy/unit.py):
Granian as production runs it (deploy/app_server.py, nginx's upstream keep-alive), and the
alternatives measured against it: uWSGI on `uwsgi_pass` (`make serve`'s until issue 26; it closes
its connection after each answer), gunicorn over HTTP with or without nginx's upstream keep-alive
(deploy.unit.http_upstream).
"""

import re
from pathlib import Path

from bench.servers import gunicorn_command, unit, uwsgi_command, uwsgi_location
from deploy.app_server import granian_command
from deploy.unit import http_upstream


def renewed_every_1000(text: str) -> str:
    """An edit for render_nginx_conf: nginx's own default in place of deploy/nginx.conf's keepalive_requests."""
    text, found = re.subn(r"keepalive_requests \d+;", "keepalive_requests 1000;", text)
    if found != 1:
        raise RuntimeError("deploy/nginx.conf has no keepalive_requests")
    return text


def stack_unit(name: str, kind: str, processes: int, threads: int, keepalive: bool, log_dir: Path, **env: str):
    """One variant: `kind` (granian, granian-kr1000, uwsgi, gunicorn-gthread, gunicorn-sync) with `processes` × `threads`."""
    if kind.startswith("granian"):  # production's command; its keep-alive is production's too
        command = granian_command(env, "bench.wsgi:application", processes, threads)
        # granian-kr1000: nginx's default keepalive_requests, its connections renewed 250 times less often.
        edit = renewed_every_1000 if kind == "granian-kr1000" else None
        return unit(name, log_dir, command, edit, **env)
    if kind == "uwsgi":
        return unit(name, log_dir, uwsgi_command(processes, threads), uwsgi_location, **env)
    command = gunicorn_command(processes, threads, kind.removeprefix("gunicorn-"))
    return unit(name, log_dir, command, http_upstream(keepalive), **env)
