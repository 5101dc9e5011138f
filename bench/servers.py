"""The servers `make bench` and `make bench-stack` run, every one a production unit (deploy/unit.py:
nginx in front of an app server on a unix socket): the service as `make serve` runs it, the peers,
and the app servers measured against uWSGI, each put behind the same nginx."""

import os
import re
from pathlib import Path

from deploy.app_server import uwsgi_command
from deploy.processes import BIN, ROOT, free_port
from deploy.unit import Unit

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"
PEER_WORKERS = 2
# nginx's idle timeout on its upstream connections: below every HTTP app server's own (gunicorn's
# keepalive 5 s, uvicorn's --timeout-keep-alive 5 s, granian's 30 s), so nginx never sends a
# request on a connection the app is closing.
UPSTREAM_IDLE_S = 4
HTTP_LOCATION = """        location / {
            proxy_pass http://app;
            proxy_http_version 1.1;
            proxy_request_buffering on;
            proxy_buffering on;
            proxy_set_header Host $http_host;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_set_header Connection "";
            proxy_read_timeout 35s;
        }
"""


def http_upstream(keepalive: bool):
    """An edit of deploy/nginx.conf for an HTTP app server: proxy_pass in place of uwsgi_pass,
    with upstream keep-alive (as nginx's users configure it) or a new connection per request."""

    def edit(text: str) -> str:
        text, found = re.subn(
            r"        location / \{\n.*?\n        \}\n", lambda _: HTTP_LOCATION, text, count=1, flags=re.S
        )
        if not found:
            raise RuntimeError("bench.servers: deploy/nginx.conf has no `location / {` block")
        if keepalive:
            text = re.sub(
                r"(        server unix:[^;]+;\n)",
                rf"\1        keepalive 32;\n        keepalive_timeout {UPSTREAM_IDLE_S}s;\n",
                text,
            )
        return text

    return edit


def unit(name: str, log_dir: Path, app_command: list[str] | None = None, nginx_edit=None, **env: str) -> Unit:
    """A unit on a free loopback port, its log in `log_dir`; uWSGI as production runs it unless `app_command`."""
    port = free_port()
    settings = {**os.environ, **env}
    command = app_command or uwsgi_command(settings, "bench.wsgi:application")
    return Unit(
        f"127.0.0.1:{port}", settings, command, log_dir / f"{name}-{port}.log", name=name, nginx_edit=nginx_edit
    )


def service(log_dir: Path, **env: str) -> Unit:
    """The service as `make serve` runs it, serving bench.wsgi (the service plus the bare view's URL)."""
    return unit("service", log_dir, **env)


def django_peer(peer: str, log_dir: Path, **env: str) -> Unit:
    """A Django peer (bench/peers/<peer>_peer) under the service's app server and settings, from its own venv."""
    settings = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": f"bench.peers.{peer}_peer.settings"}
    command = uwsgi_command(settings, f"bench.peers.{peer}_peer.wsgi:application", bin_dir=DJANGO_PEERS_BIN)
    return unit(peer, log_dir, command, **settings)


def fastapi_peer(log_dir: Path) -> Unit:
    """The FastAPI peer under uvicorn (uvloop, httptools, access log on), behind nginx with upstream
    keep-alive, its idle timeout above nginx's."""
    command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--uds", "{socket}"]
    command += ["--workers", str(PEER_WORKERS), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
    command += ["--timeout-keep-alive", "5"]
    return unit("fastapi", log_dir, command, http_upstream(keepalive=True))


def gunicorn_command(workers: int, threads: int, worker_class: str) -> list[str]:
    """gunicorn (bench/gunicorn.conf.py) serving bench.wsgi on the unit's socket: a measured alternative."""
    command = [str(BIN / "gunicorn"), "-c", str(ROOT / "bench" / "gunicorn.conf.py"), "--bind", "unix:{socket}"]
    return command + [f"--workers={workers}", f"--threads={threads}", f"--worker-class={worker_class}", "bench.wsgi"]


def granian_command(workers: int, threads: int) -> list[str]:
    """granian (a Rust HTTP server) serving bench.wsgi on the unit's socket: a measured alternative."""
    command = [str(BIN / "granian"), "--interface", "wsgi", "--uds", "{socket}", "--uds-permissions", "0o600"]
    command += ["--no-ws", "--workers", str(workers), "--blocking-threads", str(threads), "--no-access-log"]
    return command + ["bench.wsgi:application"]
