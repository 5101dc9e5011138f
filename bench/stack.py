"""App servers behind nginx, beyond what deploy/nginx.conf configures: the servers of `make bench-stack`.

Each starts nginx on deploy/nginx.conf as deploy.serve renders it, then changes it by text
substitution (NGINX_CHANGES names each change), so the lead can apply the winner's in deploy/:
- "keepalive": nginx keeps up to 32 idle connections to the app open (HTTP/1.1 upstream), closing
  them after UPSTREAM_IDLE_S, below every app server's own idle timeout (gunicorn's keepalive 5 s,
  uvicorn's --timeout-keep-alive 5 s, granian's header read timeout 30 s), so nginx never sends a
  request on a connection the app has just closed;
- "uwsgi": `uwsgi_pass` (the uwsgi protocol) instead of `proxy_pass`, with the same buffering,
  timeout and client address; uWSGI closes each connection after its answer, so no keep-alive.
"""

import tempfile
from pathlib import Path

from bench.servers import PEER_PYTHON, BehindNginx
from tests.live import ROOT, LiveGunicorn, LiveServer

UPSTREAM_IDLE_S = 4
KEEPALIVE_UPSTREAM = f"""
        keepalive 32;
        keepalive_timeout {UPSTREAM_IDLE_S}s;"""
# /etc/nginx/uwsgi_params, inline so the rendered file stands alone; HTTP_HOST and the client's
# address as deploy/nginx.conf's proxy_set_header lines send them.
UWSGI_PARAMS = """uwsgi_pass app;
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
            uwsgi_param REMOTE_ADDR $remote_addr;
            uwsgi_param REMOTE_PORT $remote_port;
            uwsgi_param SERVER_PORT $server_port;
            uwsgi_param SERVER_NAME $server_name;
            uwsgi_param HTTP_HOST $http_host;
            uwsgi_param HTTP_X_REAL_IP $remote_addr;"""
# (what deploy/nginx.conf says, what the variant says instead), applied in order.
NGINX_CHANGES = {
    "keepalive": [
        ("server unix:", None),  # the upstream's server line: KEEPALIVE_UPSTREAM goes after it
        ("proxy_pass http://app;", "proxy_pass http://app;\n            proxy_http_version 1.1;"),
    ],
    "uwsgi": [
        ("proxy_pass http://app;", UWSGI_PARAMS),
        ("proxy_request_buffering on;", "uwsgi_request_buffering on;"),
        ("proxy_buffering on;", "uwsgi_buffering on;"),
        ("proxy_set_header Host $http_host;", ""),
        ("proxy_set_header X-Real-IP $remote_addr;", ""),
        ('proxy_set_header Connection "";', ""),
        ("proxy_read_timeout 35s;", "uwsgi_read_timeout 35s;"),
    ],
}


def change_nginx_conf(path: Path, variant: str) -> None:
    """Apply one of NGINX_CHANGES to a rendered deploy/nginx.conf; fails if the file has moved on."""
    text = path.read_text()
    for old, new in NGINX_CHANGES[variant]:
        if old not in text:
            raise RuntimeError(f"bench.stack: deploy/nginx.conf no longer says {old!r}; update NGINX_CHANGES")
        if new is None:
            line_end = text.index("\n", text.index(old))
            text = text[:line_end] + KEEPALIVE_UPSTREAM + text[line_end:]
        else:
            text = text.replace(old, new, 1)
    path.write_text(text)


class BehindChangedNginx(BehindNginx):
    """BehindNginx with one of NGINX_CHANGES applied (or none)."""

    def __init__(self, name: str, app, log_dir: Path, nginx: str | None):
        super().__init__(name, app, log_dir)
        if nginx:
            change_nginx_conf(self.run_dir / "nginx.conf", nginx)


def metrics_dir() -> str:
    # Each server its own empty folder for prometheus-client's multiprocess files, as production has.
    return tempfile.mkdtemp(prefix="bench-metrics.")


def gunicorn_app(log_dir: Path, workers: int, threads: int, worker_class: str, **env: str):
    def app(socket_path: Path) -> LiveServer:
        settings = {"GUNICORN_WORKERS": str(workers), "GUNICORN_THREADS": str(threads)}
        settings["GUNICORN_WORKER_CLASS"] = worker_class
        return LiveGunicorn(log_dir, app="bench.wsgi", GUNICORN_BIND=f"unix:{socket_path}", **{**env, **settings})

    return app


def uwsgi_command(socket_path: Path, processes: int, threads: int, module: str, uwsgi: str) -> list[str]:
    """uWSGI as the bench runs it, on the uwsgi protocol; what production would run (BENCHMARKS.md)."""
    return [
        uwsgi,
        # pyuwsgi's reload (SIGHUP) re-executes the interpreter; by default the one the venv's python
        # links to, which has no pyuwsgi: the venv's own path keeps the venv.
        f"--binary-path={Path(uwsgi).parent / 'python'}",
        "--master",
        "--strict",
        "--need-app",
        "--die-on-term",  # SIGTERM stops it (uWSGI 2.0 reloads on SIGTERM otherwise)
        "--single-interpreter",
        "--enable-threads",
        "--thunder-lock",
        f"--processes={processes}",
        f"--threads={threads}",
        f"--uwsgi-socket={socket_path}",
        "--chmod-socket=666",
        f"--module={module}",
        "--disable-logging",  # the app writes the request log line
        "--buffer-size=32768",  # nginx passes header sections up to 32 KiB (large_client_header_buffers)
        "--harakiri=30",  # gunicorn.conf.py's timeout
        "--max-requests=0",
        "--vacuum",
    ]


def uwsgi_app(log_dir: Path, processes: int, threads: int, python: Path | None = None, **env: str):
    uwsgi = str((python or ROOT / ".venv" / "bin" / "python").parent / "uwsgi")

    def app(socket_path: Path) -> LiveServer:
        command = uwsgi_command(socket_path, processes, threads, "bench.wsgi:application", uwsgi)
        return LiveServer("uwsgi", command, log_dir, PROMETHEUS_MULTIPROC_DIR=metrics_dir(), **env)

    return app


def granian_app(log_dir: Path, workers: int, threads: int, **env: str):
    granian = str(ROOT / ".venv" / "bin" / "granian")

    def app(socket_path: Path) -> LiveServer:
        command = [granian, "--interface", "wsgi", "--uds", str(socket_path), "--uds-permissions", "0o666"]
        command += ["--no-ws", "--workers", str(workers), "--blocking-threads", str(threads), "--no-access-log"]
        command += ["bench.wsgi:application"]
        return LiveServer("granian", command, log_dir, PROMETHEUS_MULTIPROC_DIR=metrics_dir(), **env)

    return app


def uvicorn_app(log_dir: Path, workers: int = 2):
    """The FastAPI peer (bench/peers/fastapi_app.py) under uvicorn, its idle timeout above nginx's."""

    def app(socket_path: Path) -> LiveServer:
        command = [str(PEER_PYTHON), "-m", "uvicorn", "bench.peers.fastapi_app:app", "--uds", str(socket_path)]
        command += ["--workers", str(workers), "--loop", "uvloop", "--http", "httptools", "--log-level", "info"]
        command += ["--timeout-keep-alive", "5"]
        return LiveServer("uvicorn", command, log_dir)

    return app


def behind_nginx(name: str, app, log_dir: Path, nginx: str | None = None) -> BehindChangedNginx:
    return BehindChangedNginx(name, app, log_dir, nginx)


DJANGO_PEERS_BIN = ROOT / ".venv" / "django-peers" / "bin"


def django_peer_behind_nginx(name: str, module: str, log_dir: Path, **env: str) -> BehindChangedNginx:
    """A Django peer (bench/peers) under the service's app server and settings (gunicorn.conf.py with
    the workers and threads the service gets), from its own venv, behind the service's nginx."""

    def app(socket_path: Path) -> LiveServer:
        server = LiveGunicorn(log_dir, app=f"{module}.wsgi", GUNICORN_BIND=f"unix:{socket_path}", **env)
        server.env["DJANGO_SETTINGS_MODULE"] = f"{module}.settings"
        server.command[0] = str(DJANGO_PEERS_BIN / "gunicorn")
        return server

    return behind_nginx(name, app, log_dir)


def fastapi_behind_nginx_keepalive(log_dir: Path) -> BehindChangedNginx:
    """The FastAPI peer behind nginx with upstream keep-alive, as nginx's users configure it."""
    return behind_nginx("nginx-uvicorn-keepalive", uvicorn_app(log_dir), log_dir, "keepalive")
