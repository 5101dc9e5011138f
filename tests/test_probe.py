"""The unit's health probe (python -m deploy.probe, the image's HEALTHCHECK) asks where the unit listens."""

import http.server
import os
import socket
import subprocess
import sys
import threading
import time

from deploy.processes import ROOT


class Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if (self.path, self.headers["Host"]) == ("/livez", "plants.example.com") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


class IPv6Server(http.server.HTTPServer):
    address_family = socket.AF_INET6


def serving(server_class, address):
    server = server_class((address, 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def probe(**env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("PLANTS_LISTEN", "PORT", "DJANGO_ENV_FILE")}
    command = [sys.executable, "-m", "deploy.probe", "/livez"]
    return subprocess.run(command, cwd=ROOT, env={**clean, **env}, timeout=30).returncode


def test_the_probe_asks_plants_listen_else_port_on_loopback_as_the_unit_listens():
    server = serving(http.server.HTTPServer, "127.0.0.1")
    port = str(server.server_address[1])
    try:
        by_port = probe(PORT=port, DJANGO_ALLOWED_HOSTS="plants.example.com")
        by_listen = probe(PLANTS_LISTEN=f"0.0.0.0:{port}", PORT="1", DJANGO_ALLOWED_HOSTS="plants.example.com")
        elsewhere = probe(PLANTS_LISTEN="127.0.0.1:1", PORT=port, DJANGO_ALLOWED_HOSTS="plants.example.com")
    finally:
        server.shutdown()

    assert (by_port, by_listen, elsewhere) == (0, 0, 1)


def test_the_probe_asks_the_address_plants_listen_names_and_loopback_for_a_wildcard_one():
    """nginx on one address of the host (127.0.0.2 here) is asked there; on every IPv6 address, on ::1."""
    on_one, on_ipv6 = serving(http.server.HTTPServer, "127.0.0.2"), serving(IPv6Server, "::1")
    try:
        one = probe(PLANTS_LISTEN=f"127.0.0.2:{on_one.server_address[1]}", DJANGO_ALLOWED_HOSTS="plants.example.com")
        ipv6 = probe(PLANTS_LISTEN=f"[::]:{on_ipv6.server_address[1]}", DJANGO_ALLOWED_HOSTS="plants.example.com")
    finally:
        on_one.shutdown()
        on_ipv6.shutdown()

    assert (one, ipv6) == (0, 0)


def test_waiting_the_probe_gives_up_as_soon_as_the_server_it_waits_for_has_exited():
    """The systemd units' ExecStartPost=: a server that exits fails the start at once, not after 90 s."""
    server = subprocess.Popen(["sleep", "1"])
    threading.Thread(target=server.wait, daemon=True).start()  # reaped at its exit, as systemd reaps MAINPID
    command = [sys.executable, "-m", "deploy.probe", "--wait", str(server.pid), "/livez"]
    env = {**os.environ, "PLANTS_LISTEN": "127.0.0.1:1", "DJANGO_ALLOWED_HOSTS": "plants.example.com"}
    started = time.monotonic()
    waited = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started

    assert (waited.returncode, waited.stderr) == (
        1,
        "probe: /livez on http://127.0.0.1:1: no answer (its server exited)\n",
    )
    assert took < 30  # it asks while the server runs (1 s), then stops; the wait's own bound is 90 s


def test_a_settings_file_the_probe_cannot_read_as_written_fails_it_in_one_line_naming_the_line(tmp_path):
    env_file = tmp_path / "plantstore.env"
    env_file.write_text("PLANTS_LISTEN = 127.0.0.1:8000\n")  # systemd would read it; the probe would not
    clean = {k: v for k, v in os.environ.items() if k not in ("PLANTS_LISTEN", "PORT")}
    command = [sys.executable, "-m", "deploy.probe", "/livez"]

    failed = subprocess.run(command, cwd=ROOT, env={**clean, "DJANGO_ENV_FILE": str(env_file)}, capture_output=True)

    assert (failed.returncode, failed.stderr.decode()) == (
        1,
        f"probe: DJANGO_ENV_FILE: {env_file}, line 1 (PLANTS_LISTEN), is not NAME=value: no space before the name or around =\n",
    )
