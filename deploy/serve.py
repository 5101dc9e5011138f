"""`make serve`'s processes: gunicorn on a unix socket, and nginx in front of it on the public port."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GUNICORN = Path(sys.executable).parent / "gunicorn"


def public_address() -> str:
    # GUNICORN_BIND kept its meaning: the address clients reach. nginx answers there now.
    return os.environ.get("GUNICORN_BIND") or f"127.0.0.1:{os.environ.get('PORT', '8000')}"


def render_nginx_conf(run_dir: Path, socket_path: Path, listen: str) -> Path:
    """deploy/nginx.conf for nginx listening on `listen`, in front of the app on `socket_path`;
    also used by make bench and make bench-levers for every server they put behind nginx."""
    as_root = os.geteuid() == 0
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    for name, value in {
        # As root, nginx's workers drop to nobody; otherwise they run as whoever started it.
        "@USER@": "user nobody nogroup;" if as_root else "",
        "@LISTEN@": listen,
        "@RUN_DIR@": str(run_dir),
        "@UPSTREAM@": f"unix:{socket_path}",
    }.items():
        text = text.replace(name, value)
    path = run_dir / "nginx.conf"
    path.write_text(text)
    return path


def wait_for_socket(path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"serve: gunicorn did not open {path}")
        time.sleep(0.05)


def nginx_run_dir(prefix: str) -> Path:
    run_dir = Path(tempfile.mkdtemp(prefix=prefix))
    run_dir.chmod(0o755)  # nginx's workers (nobody, when started as root) reach the socket through it
    return run_dir


def nginx_command(run_dir: Path, conf: Path) -> list[str]:
    return [shutil.which("nginx") or "/usr/sbin/nginx", "-p", str(run_dir), "-c", str(conf), "-g", "daemon off;"]


def main() -> int:
    run_dir = nginx_run_dir("plantstore-serve.")
    socket_path = run_dir / "gunicorn.sock"
    conf = render_nginx_conf(run_dir, socket_path, public_address())
    children: list[subprocess.Popen] = []

    def stop(signum=signal.SIGTERM, frame=None):
        for child in children:
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        app = subprocess.Popen(
            [str(GUNICORN), "-c", "gunicorn.conf.py", "plantstore_site.wsgi"],
            cwd=ROOT,
            env={**os.environ, "GUNICORN_BIND": f"unix:{socket_path}"},
        )
        children.append(app)
        wait_for_socket(socket_path, app)
        children.append(subprocess.Popen(nginx_command(run_dir, conf)))
        sys.stderr.write(f"serve: nginx on http://{public_address()}, gunicorn on {socket_path}\n")
        # Whichever stops first (a signal, or a crash) stops the other.
        while all(child.poll() is None for child in children):
            time.sleep(0.2)
    finally:
        stop()
        for child in children:
            try:
                child.wait(timeout=40)
            except subprocess.TimeoutExpired:
                child.kill()
        shutil.rmtree(run_dir, ignore_errors=True)
    return 0 if all(child.returncode == 0 for child in children) else 1


if __name__ == "__main__":
    sys.exit(main())
