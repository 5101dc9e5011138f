"""The unit's health probe (python -m deploy.probe, the image's HEALTHCHECK) asks where the unit listens."""

import http.server
import os
import subprocess
import sys
import threading

from deploy.processes import ROOT


class Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if (self.path, self.headers["Host"]) == ("/livez", "plants.example.com") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def probe(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("PLANTS_LISTEN", "PORT", "DJANGO_ENV_FILE")}
    command = [sys.executable, "-m", "deploy.probe", "/livez"]
    return subprocess.run(command, cwd=ROOT, env={**clean, **env}, timeout=30).returncode


def test_the_probe_asks_plants_listen_else_port_on_loopback_as_the_unit_listens():
    server = http.server.HTTPServer(("127.0.0.1", 0), Answers)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = str(server.server_address[1])
    try:
        by_port = probe(PORT=port, DJANGO_ALLOWED_HOSTS="plants.example.com")
        by_listen = probe(PLANTS_LISTEN=f"0.0.0.0:{port}", PORT="1", DJANGO_ALLOWED_HOSTS="plants.example.com")
        elsewhere = probe(PLANTS_LISTEN="127.0.0.1:1", PORT=port, DJANGO_ALLOWED_HOSTS="plants.example.com")
    finally:
        server.shutdown()

    assert (by_port, by_listen, elsewhere) == (0, 0, 1)
