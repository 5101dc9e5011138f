"""`make serve`, the production path: migrate, collectstatic, nginx in front of gunicorn, debug off."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from deploy.processes import ROOT, free_port
from tests.live import request, wait_until_healthy

VENV = Path(sys.executable).parent.parent


@pytest.fixture
def served(tmp_path):
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("DJANGO_")},
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "DJANGO_SECRET_KEY": "serve-test-secret-key-" + "x" * 40,
        "DJANGO_STATIC_ROOT": str(tmp_path / "static"),
        "PORT": str(port),
        "GUNICORN_WORKERS": "1",
    }
    log = (tmp_path / "serve.log").open("w+")
    # -o: the venv is already set up; make must not try to reinstall it.
    process = subprocess.Popen(
        ["make", f"VENV={VENV}", "-o", f"{VENV}/.runtime", "serve"],
        cwd=ROOT,
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    if not wait_until_healthy(url, process, timeout=90):
        log.seek(0)
        pytest.fail(f"make serve did not come up:\n{log.read()}")
    yield url, log
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def test_make_serve_migrates_collects_static_and_serves_through_nginx_with_one_log_line_each(served):
    url, log = served

    health = request(f"{url}/healthz")
    admin_css = request(f"{url}/static/admin/css/base.css")
    unknown = request(f"{url}/no-such-page")

    assert (health[0], health[2], health[1]["Server"]) == (200, '{"status": "ok"}', "nginx")
    assert (admin_css[0], admin_css[1]["Content-Type"].split(";")[0]) == (200, "text/css")
    assert (unknown[0], unknown[1]["Content-Type"]) == (404, "application/json")
    time.sleep(0.5)
    log.seek(0)
    output = log.read()
    assert "manage.py migrate" in output
    assert output.count("/no-such-page") == 1  # the app's request log line; gunicorn's access log is off
