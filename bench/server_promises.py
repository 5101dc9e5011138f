"""What the service promises, checked under uWSGI (uwsgi_pass) or granian (keep-alive) behind nginx.

The servers as bench/stack.py runs them. Run under scripts/with-postgres:
`scripts/with-postgres .venv/bin/python -m bench.server_promises uwsgi` (or `granian`).
A scratch check for choosing the app server, not a test: prints one line per promise, and fails if
one is broken. What it checks: a chunked body (de-chunked by nginx) reaches the app with a length;
one request log line per request from the app and none from the server; SIGHUP reloads the workers
gracefully while clients keep creating plants; prometheus multiprocess metrics count every worker's
requests; the address client_ip() (the admin's login throttle) sees is nginx's $remote_addr, a
client's own X-Real-IP ignored.
"""

import http.client
import json
import os
import re
import signal
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

from bench.run import ENV, LOG_DIR, manage
from bench.stack import behind_nginx, granian_app, uwsgi_app
from tests.live import Load

METRICS_TOKEN = "m" * 40


def post_chunked(url: str, token: str, body: bytes) -> int:
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json", "Transfer-Encoding": "chunked"}
    connection.request("POST", "/plants", body=iter([body[:7], body[7:]]), headers=headers, encode_chunked=True)
    return connection.getresponse().status


def main() -> None:
    env = {**ENV, "PLANTS_METRICS_TOKEN": METRICS_TOKEN, "DJANGO_SETTINGS_MODULE": "bench.settings"}
    manage("migrate", "--no-input", env=env)
    manage("collectstatic", "--no-input", "-v", "0", env=env)  # the admin's login page needs the manifest
    token = manage("token", "issue", "uwsgi-promises", env=env).strip()
    kind = sys.argv[1] if len(sys.argv) > 1 else "uwsgi"
    if kind == "uwsgi":
        server = behind_nginx("uwsgi-promises", uwsgi_app(LOG_DIR, 2, 4, **env), LOG_DIR, "uwsgi").start()
    else:
        server = behind_nginx("granian-promises", granian_app(LOG_DIR, 2, 4, **env), LOG_DIR, "keepalive").start()
    results = {}
    try:
        url = server.url
        results["chunked body reaches the app with a length (200)"] = post_chunked(
            url, token, json.dumps({"id": 10**12, "name": "chunked"}).encode()
        )
        before = server.app.worker_pids()
        with Load(f"{url}/plants", token, clients=6) as load:
            load.wait_for(200)
            os.kill(server.app.process.pid, signal.SIGHUP)
            time.sleep(6)
            load.wait_for(len(load.answers) + 200)
        after = server.app.worker_pids()
        statuses = [status for _, status, *_ in load.answers]
        failed = len(statuses) - statuses.count(200)
        results[f"SIGHUP under load: {len(statuses)} requests, failed"] = failed
        results["SIGHUP: new workers"] = not set(before) & set(after)
        created = 1 + statuses.count(200)
        text = metrics(url)
        counted = sum(
            float(line.split()[-1])
            for line in text.splitlines()
            if line.startswith("plants_creates_total") and 'outcome="created"' in line
        )
        results[f"metrics count every create ({created} answered 200)"] = counted
        forged = urllib.request.Request(f"{url}/bench/client-address", headers={"X-Real-IP": "203.0.113.9"})
        with urllib.request.urlopen(forged, timeout=10) as response:
            results["address client_ip() sees (127.0.0.1, not the client's X-Real-IP 203.0.113.9)"] = response.read()
        log = Path(server.app.log_path).read_text(errors="replace")
        app_lines = sum(1 for line in log.splitlines() if '"path": "/plants"' in line)
        uwsgi_lines = sum(1 for line in log.splitlines() if re.match(r"\[pid: \d+\|app: |.*\baccess\b", line))
        results[f"app request log lines for /plants ({created} expected)"] = app_lines
        results["uWSGI-style request log lines from the server (0 expected)"] = uwsgi_lines
    finally:
        server.stop()
    for what, value in results.items():
        print(f"{what}: {value}")


def metrics(url: str) -> str:
    req = urllib.request.Request(f"{url}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as response:
        return response.read().decode()


if __name__ == "__main__":
    main()
