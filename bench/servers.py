"""The servers `make bench` and `make bench-stack` run, every one a production unit (deploy/unit.py:
nginx in front of an app server on a unix socket): the service as `make serve` runs it, the peers,
and the app servers measured against Granian, each put behind the same nginx."""

import os
import re
from pathlib import Path

from deploy.app_server import granian_command
from deploy.processes import BIN, ROOT, free_port
from deploy.unit import Unit, http_upstream

PEER_PYTHON = Path(os.environ.get("BENCH_PEER_PYTHON", ROOT / ".venv" / "peers" / "bin" / "python"))
DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"
PEER_WORKERS = 2


def unit(name: str, log_dir: Path, app_command: list[str] | None = None, nginx_edit=None, **env: str) -> Unit:
    """A unit on a free loopback port, its log in `log_dir`; Granian as production runs it unless `app_command`."""
    port = free_port()
    settings = {**os.environ, **env}
    command = app_command or granian_command(settings, "bench.wsgi:application")
    return Unit(
        f"127.0.0.1:{port}", settings, command, log_dir / f"{name}-{port}.log", name=name, nginx_edit=nginx_edit
    )


def service(log_dir: Path, **env: str) -> Unit:
    """The service as `make serve` runs it, serving bench.wsgi (the service plus the bare view's URL)."""
    return unit("service", log_dir, **env)


def django_peer(peer: str, log_dir: Path, **env: str) -> Unit:
    """A Django peer (bench/peers/<peer>_peer) under the service's app server and settings, from its own venv."""
    settings = {**os.environ, **env, "DJANGO_SETTINGS_MODULE": f"bench.peers.{peer}_peer.settings"}
    command = granian_command(settings, f"bench.peers.{peer}_peer.wsgi:application", bin_dir=DJANGO_PEERS_BIN)
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


def uwsgi_command(processes: int, threads: int) -> list[str]:
    """uWSGI (`pyuwsgi`, requirements-tools.txt) serving bench.wsgi on the unit's socket, as `make serve`
    ran it until issue 26: a measured alternative, behind nginx on `uwsgi_pass` (uwsgi_location)."""
    return [
        str(BIN / "uwsgi"),
        "--master",
        "--strict",
        "--need-app",
        "--module=bench.wsgi:application",
        "--uwsgi-socket={socket}",
        "--chmod-socket=600",  # the unit gives it to nginx's workers (deploy/unit.py)
        f"--processes={processes}",
        f"--threads={threads}",
        "--enable-threads",
        "--single-interpreter",
        "--thunder-lock",
        "--harakiri=30",
        "--disable-logging",
        "--buffer-size=32768",
        "--hook-master-start=unix_signal:15 gracefully_kill_them_all",
        "--vacuum",
    ]


# deploy/nginx.conf's `location /` for uWSGI: the uwsgi protocol, with the CGI variables of the
# request (Debian's /etc/nginx/uwsgi_params) and the client's address in REMOTE_ADDR and X-Real-IP.
UWSGI_LOCATION = """        location / {
            uwsgi_pass app;
            uwsgi_request_buffering on;
            uwsgi_buffering on;
            uwsgi_read_timeout 35s;
            uwsgi_param QUERY_STRING $query_string;
            uwsgi_param REQUEST_METHOD $request_method;
            uwsgi_param CONTENT_TYPE $content_type;
            uwsgi_param CONTENT_LENGTH $content_length;
            uwsgi_param REQUEST_URI $request_uri;
            uwsgi_param PATH_INFO $document_uri;
            uwsgi_param DOCUMENT_ROOT $document_root;
            uwsgi_param SERVER_PROTOCOL $server_protocol;
            uwsgi_param REQUEST_SCHEME $scheme;
            uwsgi_param HTTPS $https if_not_empty;
            uwsgi_param REMOTE_PORT $remote_port;
            uwsgi_param SERVER_PORT $server_port;
            uwsgi_param SERVER_NAME $server_name;
            uwsgi_param HTTP_HOST $http_host;
            uwsgi_param REMOTE_ADDR $remote_addr;
            uwsgi_param HTTP_X_REAL_IP $remote_addr;
            uwsgi_param HTTP_X_FORWARDED_PROTO $forwarded_proto;
        }
"""


def uwsgi_location(text: str) -> str:
    """An edit for render_nginx_conf: `uwsgi_pass` in place of `proxy_pass`, no upstream keep-alive
    (uWSGI closes its connection after each answer)."""
    text = http_upstream(keepalive=False)(text)
    text, found = re.subn(
        r"        location / \{\n.*?\n        \}\n", lambda _: UWSGI_LOCATION, text, count=1, flags=re.S
    )
    if not found:
        raise RuntimeError("deploy/nginx.conf has no `location / {` block")
    return text
