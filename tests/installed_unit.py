"""The systemd units on a host of tests/systemd_host.py, installed as docs/deploying.md says: what their
operator does to them and sees of them (the settings file, releases, systemctl, the journal, requests)."""

import time

from tests.live import PUBLIC_HOST, Load, request
from tests.systemd_host import SystemdHost

ENV_FILE = "/etc/plantstore/plantstore.env"
# .env.example's failover pair (a primary and its standby): nothing answers on 5433, so libpq goes
# on to 5432, the host's PostgreSQL. The URL has `&` in it, as .env.example's form has.
FAILOVER_URL = (
    "postgres://plantstore:{password}@/plantstore?host=127.0.0.1,127.0.0.1&port=5433,5432"
    "&target_session_attrs=read-write&connect_timeout=2"
)
SQLITE_URL = "sqlite:////var/lib/plantstore/db.sqlite3"
# A day's window, far above what the loads send: the limit stays on, counted, never reached.
RATE = 1_000_000
# How the docs' management commands run on the host (docs/operating.md, Tokens).
MANAGE = "cd /opt/plantstore && deploy/plantstore-manage"
RELEASE = "/opt/plantstore/deploy/plantstore-release"
EDGE_FILE = "/etc/plantstore/edge.env"  # what nginx is given, the serving slot among it
# The tests' own token, issued once the service runs; the docs' token is billing-service's.
CLIENT = "tests-client"
# The name a monitoring host's Prometheus scrapes the host's nginx by, listed in DJANGO_ALLOWED_HOSTS
# beside the public name, as docs/operating.md's Alerts has an operator list it.
PROMETHEUS_NAMES_IT = "localhost"
REFUSED_KEY = "change-me-to-50-random-characters"  # .env.example's placeholder: the app refuses to start on it
# The TLS proxy in front of the unit on the host itself, for the docs' requests to the public name
# (https://plants.example.com, looked up in the host's /etc/hosts): Debian's nginx, run by a transient
# unit, its certificate self-signed and added to the host's authorities (a copy of the bundle with it,
# mounted over the one podman mounted read-only). It connects to the unit from 127.0.0.1.
TLS_PROXY_ADDRESS = "127.0.0.1"
TLS_PROXY = """\
pid /run/tls-proxy.pid;
error_log stderr;
events {{}}
http {{
    access_log off;
    server {{
        listen {address}:443 ssl;
        server_name {host};
        ssl_certificate /etc/tls-proxy/certificate.pem;
        ssl_certificate_key /etc/tls-proxy/key.pem;
        location / {{
            proxy_pass http://127.0.0.1:8000;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto https;
        }}
    }}
}}
"""


class Deployed:
    """The service on the host, as the docs install it: what the tests do to it as its operator."""

    def __init__(self, host: SystemdHost):
        self.host, self.url = host, host.url
        self.token = ""  # a token of the service's, issued as docs/operating.md says

    def configure(self, **settings: str) -> None:
        """Set `settings` in the environment file, in place of its lines of the same name, as an operator edits it."""
        lines = self.host.run(f"cat {ENV_FILE}").stdout.splitlines()
        for name, value in settings.items():
            found = [index for index, line in enumerate(lines) if line.startswith(f"{name}=")]
            if found:
                lines[found[0]] = f"{name}={value}"
            else:
                lines.append(f"{name}={value}")
        self.host.run(f"cat >{ENV_FILE}", input="\n".join(lines) + "\n")  # `>` keeps its mode, 600

    def unconfigure(self, *names: str) -> None:
        """Remove the lines of `names` from the environment file."""
        lines = self.host.run(f"cat {ENV_FILE}").stdout.splitlines()
        kept = [line for line in lines if line.split("=", 1)[0] not in names]
        self.host.run(f"cat >{ENV_FILE}", input="\n".join(kept) + "\n")

    def start_tls_proxy(self) -> None:
        """The TLS proxy on the host for the public name (TLS_PROXY)."""
        self.host.run("install -d -m 700 /etc/tls-proxy")
        self.host.run(
            "cat >/etc/tls-proxy/nginx.conf", input=TLS_PROXY.format(address=TLS_PROXY_ADDRESS, host=PUBLIC_HOST)
        )
        self.host.run(
            "cd /etc/tls-proxy && openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN={host}"
            " -addext subjectAltName=DNS:{host} -keyout key.pem -out certificate.pem 2>/dev/null"
            " && cat /etc/ssl/certs/ca-certificates.crt certificate.pem >ca-certificates.crt"
            " && mount --bind ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"
            " && echo '{address} {host}' >>/etc/hosts"
            " && systemd-run --quiet --unit=tls-proxy nginx -c /etc/tls-proxy/nginx.conf -g 'daemon off;'"
            " && until curl -so /dev/null https://{host}/livez; do sleep 0.2; done".format(
                host=PUBLIC_HOST, address=TLS_PROXY_ADDRESS
            ),
            timeout=60,
        )

    def restart(self) -> int:
        """systemctl restart plantstore.target: its exit status, once nginx and the slot are ready again."""
        return self.host.run("systemctl restart plantstore.target", check=False).returncode

    def release(self, check: bool = True):
        """deploy/plantstore-release, as root: the finished process (its exit status, its lines)."""
        return self.host.run(RELEASE, check=check, timeout=240)

    def state(self, asked_as: str = EDGE_FILE) -> dict:
        """What the host says serves: the slot nginx sends to (asked of it where the settings file `asked_as`
        says, as deploy/plantstore-release asks), the slot nginx's file names, and the slots active and enabled."""
        lines = self.host.run(
            f"cd /opt/plantstore && DJANGO_ENV_FILE={asked_as} .venv/bin/python -m deploy.probe --header X-Upstream"
            f" /_edge/upstream || echo; sed -n 's/^PLANTS_APP_SLOT=//p' {EDGE_FILE}"
            " && for slot in a b; do echo $slot $(systemctl is-active plantstore-app@$slot)"
            " $(systemctl is-enabled plantstore-app@$slot); done"
        ).stdout.splitlines()
        slots = [line.split() for line in lines[2:]]
        return {
            "nginx": lines[0].removeprefix("unix:/run/plantstore/").removesuffix("/app.sock"),
            "file": lines[1],
            "active": [slot for slot, active, _ in slots if active == "active"],
            "enabled": [slot for slot, _, enabled in slots if enabled == "enabled"],
        }

    def slot(self) -> str:
        """The serving slot, as nginx's file names it: a or b."""
        return self.host.run(f"sed -n 's/^PLANTS_APP_SLOT=//p' {EDGE_FILE}").stdout.strip()

    def app_environment(self, name: str) -> str:
        """The value of `name` in the environment of the app server's workers (one value for all)."""
        values = {
            self.host.run(f"tr '\\0' '\\n' </proc/{worker}/environ | grep '^{name}='").stdout
            for worker in self.app_workers()
        }
        [value] = values
        return value.strip().split("=", 1)[1]

    def issue(self, name: str) -> str:
        return self.host.run(f"{MANAGE} token issue {name}").stdout.strip()

    def create(self, plant_id: int, token: str, name: str = "Monstera", **headers: str):
        """A create through the host's nginx, as its TLS proxy sends it on (the proxy is this machine)."""
        return request(f"{self.url}/plants", {"id": plant_id, "name": name}, token, proxy="127.0.0.1", **headers)

    def load(self, token: str, first_id: int, **options) -> Load:
        return Load(f"{self.url}/plants", token, first_id=first_id, proxy="127.0.0.1", **options)

    def show(self, unit: str, *properties: str) -> dict[str, str]:
        shown = self.host.run(f"systemctl show {unit} -p {','.join(properties)}").stdout.splitlines()
        return dict(line.split("=", 1) for line in shown)

    def active(self) -> dict[str, str]:
        """The state of each unit that serves: nginx's and the serving slot's."""
        units = ("plantstore-nginx", f"plantstore-app@{self.slot()}")
        return {unit: self.show(unit, "ActiveState", "SubState") for unit in units}

    def processes(self) -> dict[int, tuple[int, str]]:
        """The service user's processes: {pid: (parent pid, command line)}."""
        listed = self.host.run("ps -u plantstore -o pid=,ppid=,args= || true").stdout.splitlines()
        return {int(pid): (int(ppid), args) for pid, ppid, args in (line.split(None, 2) for line in listed)}

    def serving(self) -> tuple[str, set[int]]:
        """The serving slot and its app workers."""
        return self.slot(), self.app_workers()

    def app_main(self) -> int:
        """The serving slot's Granian (its main process)."""
        return int(self.show(f"plantstore-app@{self.slot()}", "MainPID")["MainPID"])

    def app_workers(self) -> set[int]:
        """Granian's workers: the children of the serving slot's main process."""
        main = self.app_main()
        return {pid for pid, (parent, _) in self.processes().items() if parent == main}

    def journal(self, since: str, *options: str) -> list[str]:
        """journalctl -u 'plantstore-*' -o cat: the units' lines from `since` (now()'s) on."""
        return self.host.journal("-u 'plantstore-*' -o cat", f"--since=@{since}", *options).splitlines()

    def now(self) -> str:
        """The host's time, for journal(): journalctl --after-cursor finds nothing with -u on systemd 252."""
        return self.host.run("date +%s.%N").stdout.strip()

    def wait_healthy(self, timeout: float = 60) -> int:
        deadline = time.monotonic() + timeout
        while (status := request(f"{self.url}/healthz", proxy="127.0.0.1")[0]) != 200 and time.monotonic() < deadline:
            time.sleep(0.2)
        return status

    def wait_for_line(self, since: str, text: str, *options: str, timeout: float = 10) -> str:
        """The first line of the units' journal from `since` on that holds `text`, waiting for it."""
        deadline = time.monotonic() + timeout
        while True:
            lines = self.journal(since, *options)
            found = [line for line in lines if text in line]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                raise AssertionError(f"no line with {text!r} in the journal:\n" + "\n".join(lines[-30:]))
            time.sleep(0.2)
