"""What watches make cluster in tests/test_alerts_live.py, each on a loopback port of its own with its
files in a temp dir: Debian's Prometheus with deploy/prometheus/'s configuration and rules unchanged
(beside them only what docs/operating.md has an operator write: the metrics token and the targets
files), its blackbox exporter, a postgres_exporter per database node, Alertmanager with the example
route (its receivers' URLs alone replaced, as an operator replaces them), and a webhook receiver."""

import http.server
import json
import re
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlencode

import yaml

from deploy.processes import ROOT, stop_process, wait_until
from localcluster.processes import accepts_connections, free_port
from tests.live import alert_rules, request, wait_until_healthy

SHIPPED = ROOT / "deploy" / "prometheus"
# A series a rule selects: a name with its matchers, or one of the service's alone
# (plants_rate_limit_uncounted_total); a recorded series' name (job:…) is none.
RULE_SELECTOR = re.compile(r"(?<![:\w])(?:([a-z_]\w*)\{([^}]*)\}|(plants_\w+)\b(?!\{))")
# A matcher of one label's exact value: kind="unavailable" (not status=~"5..", not proxy!="metrics").
EQUALITY = re.compile(r'(\w+)\s*=\s*"([^"]*)"')
# The jobs an expression names: job="plantstore", job=~"plantstore-edge|haproxy".
JOB_MATCHER = re.compile(r'\bjob=~?"([^"]*)"')


def jobs_named(expr: str) -> set[str]:
    """The jobs an expression's job matchers name (each alternative of a regex's)."""
    return {job for matcher in JOB_MATCHER.findall(expr) for job in matcher.split("|")}


def rule_selectors() -> set[tuple[str, str]]:
    """(series name, matchers) of each selector of the shipped rules."""
    return {
        (name or bare, matchers)
        for rule in alert_rules()
        for name, matchers, bare in RULE_SELECTOR.findall(rule["expr"])
    }


def series_the_rules_read() -> set[str]:
    """What each selector of the shipped rules needs to exist, as a selector: its name and its exact
    matchers, once for each job a `job=~"a|b"` names (`status=~"5.."`, `proxy!="metrics"` left out)."""
    found = set()
    for name, matchers in rule_selectors():
        exact = [(label, value) for label, value in EQUALITY.findall(matchers) if label != "job"]
        for labels in [exact + [("job", job)] for job in jobs_named(matchers)] or [exact]:
            matched = ", ".join(f'{label}="{value}"' for label, value in labels)
            found.add(f"{name}{{{matched}}}" if matched else name)
    return found


def installed(name: str, package: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (Debian package {package}: make system-packages)")
    return found


class Server:
    """A server process listening on 127.0.0.1:`port` (its command names the address), its output in a
    log of `work_dir`."""

    def __init__(self, name: str, command: list[str], port: int, work_dir: Path, env: dict | None = None):
        self.name, self.command, self.port, self.env = name, command, port, env
        self.address = f"127.0.0.1:{port}"
        self.log_path = work_dir / f"{name}.log"
        self.process: subprocess.Popen | None = None

    def start(self) -> "Server":
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: accepts_connections(self.port), self.process, 30, self.name)
        except RuntimeError as error:
            raise RuntimeError(f"{error}: {self.log()}") from None
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        stop_process(self.process)


class WebhookReceiver:
    """Alertmanager's webhook receiver: every notification, as (the receiver its path names, its JSON)."""

    def __init__(self):
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append((self.path.strip("/"), json.loads(body)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def url(self, receiver: str) -> str:
        return f"http://127.0.0.1:{self.port}/{receiver}"

    def notified(self, receiver: str, alertname: str) -> list[dict]:
        """The notifications `receiver` got that carry `alertname`, firing."""
        return [
            body
            for path, body in list(self.received)
            if path == receiver
            and any(a["labels"]["alertname"] == alertname and a["status"] == "firing" for a in body["alerts"])
        ]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def alertmanager(work_dir: Path, webhook: WebhookReceiver) -> Server:
    """deploy/prometheus/alertmanager.yml with each receiver's URL the webhook's, and no cluster peers."""
    config = yaml.safe_load((SHIPPED / "alertmanager.yml").read_text())
    for receiver in config["receivers"]:
        for webhook_config in receiver["webhook_configs"]:
            webhook_config["url"] = webhook.url(receiver["name"])
    (work_dir / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    command = [
        installed("prometheus-alertmanager", "prometheus-alertmanager"),
        f"--config.file={work_dir / 'alertmanager.yml'}",
        f"--storage.path={work_dir / 'alertmanager'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",
    ]
    return Server("alertmanager", command, port, work_dir)


def blackbox_exporter(work_dir: Path) -> Server:
    port = free_port()
    command = [
        installed("prometheus-blackbox-exporter", "prometheus-blackbox-exporter"),
        f"--config.file={SHIPPED / 'blackbox.yml'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return Server("blackbox", command, port, work_dir)


def postgres_exporter(work_dir: Path, name: str, data_source: str) -> Server:
    port = free_port()
    command = [
        installed("prometheus-postgres-exporter", "prometheus-postgres-exporter"),
        f"--extend.query-path={SHIPPED / 'postgres-exporter-queries.yaml'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    return Server(name, command, port, work_dir, env={"DATA_SOURCE_NAME": data_source})


class ShippedPrometheus:
    """Debian's Prometheus reading deploy/prometheus/'s files, copied unchanged into a folder of its own
    beside the metrics token and `targets`: {targets file name: its target groups}."""

    def __init__(self, work_dir: Path, metrics_token: str, targets: dict[str, list[dict]]):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.work_dir = work_dir
        self.etc = etc = work_dir / "etc"
        (etc / "targets").mkdir(parents=True)
        for path in SHIPPED.iterdir():
            shutil.copy(path, etc / path.name)
        token = etc / "metrics-token"
        token.touch(mode=0o600)
        token.write_text(metrics_token)
        for name, groups in targets.items():
            (etc / "targets" / name).write_text(yaml.safe_dump(groups))
        self.process: subprocess.Popen | None = None

    def start(self) -> "ShippedPrometheus":
        command = [
            installed("prometheus", "prometheus"),
            f"--config.file={self.etc / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.work_dir / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
        ]
        with (self.work_dir / "prometheus.log").open("ab") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        if not wait_until_healthy(self.url, self.process, timeout=30, path="/-/ready"):
            raise RuntimeError(f"prometheus did not start: {(self.work_dir / 'prometheus.log').read_text()}")
        return self

    def api(self, path: str, **params: str) -> dict | list:
        status, _, text = request(f"{self.url}/api/v1/{path}?{urlencode(params)}", proxy=None)
        if status != 200:
            raise RuntimeError(f"prometheus answered {status}: {text}")
        return json.loads(text)["data"]

    def query(self, promql: str) -> list[dict]:
        return self.api("query", query=promql)["result"]

    def alerts(self) -> dict[str, str]:
        """Each alert pending or firing now (Prometheus' ALERTS series), by name: its state, or firing
        when any of its series fires."""
        states: dict[str, str] = {}
        for sample in self.query("ALERTS"):
            name, state = sample["metric"]["alertname"], sample["metric"]["alertstate"]
            states[name] = "firing" if "firing" in (state, states.get(name)) else state
        return states

    def targets(self) -> list[tuple[str, str]]:
        """(job, health) of every target: health up, down or unknown (not scraped yet)."""
        return sorted((t["labels"]["job"], t["health"]) for t in self.api("targets")["activeTargets"])

    def stop(self) -> None:
        stop_process(self.process)


def watching_directory() -> Path:
    return Path(tempfile.mkdtemp(prefix="plantstore-monitoring."))


@contextmanager
def running(work_dir: Path, webhook: WebhookReceiver, servers: list) -> Iterator[None]:
    """`servers` started in order (Prometheus last, once what it scrapes listens); on leaving, whatever
    happens, those started stopped in the reverse order, the webhook receiver too, and `work_dir` removed."""
    started = []
    try:
        for server in servers:
            started.append(server.start())
        yield
    finally:
        for server in reversed(started):
            server.stop()
        webhook.stop()
        shutil.rmtree(work_dir, ignore_errors=True)
