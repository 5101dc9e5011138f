"""The measurement of docs/decisions/supervisor.md's "The usual alternative, tried on a host": the unit's
supervisor and the alternative in deploy/alternative/, each on one host of tests/systemd_host.py, the same cases.

    .venv/bin/python -m tests.alternative_host [RUNS] [supervisor|alternative|sandboxed ...]

RUNS reloads under load, and a third as many of each other case: a release that cannot import, a
config nginx refuses, a setting changed. Prints each run's outcome, then all of them as JSON.
"""

import json
import secrets
import sys
import time

from tests.installed_unit import FAILOVER_URL, RATE, Deployed, command_blocks
from tests.live import request
from tests.systemd_host import booted_host

RELEASES = "/opt/plantstore-releases"
HERE = "/opt/plantstore/deploy/alternative"
# "sandboxed": the alternative with nginx-sandbox.conf as a drop-in for Debian's nginx.service.
RELOAD = {
    "supervisor": "systemctl reload plantstore",
    "alternative": f"{HERE}/deploy-release",
    "sandboxed": f"{HERE}/deploy-release",
}


def prepare(service: Deployed) -> None:
    """tests/test_systemd_host.py's install, on the host's PostgreSQL through the failover pair's
    URL, then two releases in folders of their own (r1, r2) and two that must be refused: one whose
    wsgi module raises, one whose nginx config (either design's) has a typo."""
    host = service.host
    install, release, folder = command_blocks()
    host.run(install)
    password = secrets.token_hex(16)
    host.run(
        "cd / && runuser -u postgres -- createuser plantstore && runuser -u postgres -- createdb --owner plantstore"
        f" plantstore && runuser -u postgres -- psql -q -c \"ALTER ROLE plantstore PASSWORD '{password}'\""
    )
    gateway = host.run("ip -4 route show default").stdout.split()[2]
    service.configure(
        DJANGO_SECRET_KEY=secrets.token_urlsafe(50),
        PLANTS_METRICS_TOKEN=secrets.token_urlsafe(32),
        DATABASE_URL=FAILOVER_URL.format(password=password),
        PLANTS_TRUSTED_PROXIES=gateway,
        PLANTS_THROTTLE_RATE=f"{RATE}/day",
    )
    lines = release.splitlines()
    host.run("\n".join(line for line in lines if not line.startswith("systemctl")))
    lines = folder.splitlines()
    switch = next(index for index, line in enumerate(lines) if line.startswith("ln -sfn"))
    for name in ("r1", "r2"):
        host.run("\n".join([f"release={RELEASES}/{name}", *lines[1:switch]]), timeout=900)
        link(service, "r1")  # after r1's block has made the installed checkout a release
    host.run(
        f"cp -a {RELEASES}/r1 {RELEASES}/broken"
        f" && echo 'raise RuntimeError(\"this release cannot start\")' >>{RELEASES}/broken/plantstore_site/wsgi.py"
        f" && cp -a {RELEASES}/r1 {RELEASES}/typo"
        f" && sed -i 's/^worker_processes 1;/&\\nno_such_directive on;/' {RELEASES}/typo/deploy/nginx.conf"
        f" && sed -i 's/^upstream app {{/no_such_directive on;\\n&/' {RELEASES}/typo/deploy/alternative/nginx-site.conf"
    )


def link(service: Deployed, name: str) -> None:
    service.host.run(f"ln -sfn {RELEASES}/{name} /opt/plantstore.next && mv -T /opt/plantstore.next /opt/plantstore")


def install(service: Deployed, design: str) -> None:
    host = service.host
    if design == "supervisor":
        host.run("systemctl start plantstore")
        return
    host.run(
        "systemctl disable --now plantstore 2>/dev/null || true\n"
        "usermod -aG plantstore www-data\n"
        f"install -m 644 {HERE}/plantstore-app@.service /etc/systemd/system/\n"
        "rm -f /etc/nginx/sites-enabled/default\n"
        "grep -q worker_shutdown_timeout /etc/nginx/nginx.conf ||"
        " sed -i 's/^pid .*/&\\nworker_shutdown_timeout 35s;/' /etc/nginx/nginx.conf\n"
        "systemctl daemon-reload && systemctl enable --quiet nginx\n"
        f"{RELOAD['alternative']}"
    )
    if design == "sandboxed":
        host.run(
            f"install -D -m 644 {HERE}/nginx-sandbox.conf /etc/systemd/system/nginx.service.d/sandbox.conf\n"
            "systemctl daemon-reload && systemctl restart nginx"
        )


def app_servers(service: Deployed) -> dict[int, str]:
    """Granian's main processes: {pid: the release it runs from}."""
    processes = service.processes()
    mains = [
        pid
        for pid, (parent, args) in processes.items()
        if "bin/granian" in args and "bin/granian" not in processes.get(parent, (0, ""))[1]
    ]
    return {pid: service.host.run(f"readlink /proc/{pid}/cwd", check=False).stdout.strip() for pid in mains}


def wait_gone(service: Deployed, pids, timeout: float = 60) -> float:
    deadline = time.monotonic() + timeout
    while set(pids) & set(app_servers(service)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return time.monotonic()


class Ids:
    """The next plant id a load or a create starts from: never one created before on the host."""

    next = 100_000


def under_load(service: Deployed, token: str, action, after: int = 300) -> dict:
    """`action()` (what it returns) while 4 clients create plants; then `after` more answers."""
    with service.load(token, first_id=Ids.next, clients=4, limit=10**6, timeout=30) as load:
        load.wait_for(50)
        outcome = action()
        answered = len(load.answers)
        load.wait_for(answered + after)
    Ids.next += len(load.answers) + 1000
    failed = [(status, text[:200]) for _, status, _, text, _ in load.answers if status != 200]
    return {**outcome, "requests": len(load.answers), "failed": len(failed), "failures": failed[:5]}


def reload_case(service: Deployed, design: str, token: str, release: str) -> dict:
    old = app_servers(service)
    link(service, release)

    def action():
        started = time.monotonic()
        done = service.host.run(RELOAD[design], check=False)
        returned = time.monotonic()
        gone = wait_gone(service, old)
        return {
            "exit": done.returncode,
            "said": (done.stdout + done.stderr).strip()[-300:],
            "reload_s": round(returned - started, 2),
            "old_gone_s": round(gone - started, 2),
        }

    outcome = under_load(service, token, action)
    now = app_servers(service)
    outcome["serves"] = sorted(set(now.values()))
    outcome["replaced"] = not (set(old) & set(now))
    return outcome


def refused_case(service: Deployed, design: str, token: str, release: str, back: str) -> dict:
    old = app_servers(service)
    link(service, release)
    since = service.now()

    def action():
        started = time.monotonic()
        done = service.host.run(RELOAD[design], check=False)
        return {
            "exit": done.returncode,
            "said": (done.stdout + done.stderr).strip()[-400:],
            "reload_s": round(time.monotonic() - started, 2),
        }

    outcome = under_load(service, token, action)
    link(service, back)
    outcome["unchanged"] = app_servers(service) == old
    units = "-u plantstore" if design == "supervisor" else "-u 'plantstore-app@*'"
    journal = service.host.journal(units, "-o cat", f"--since=@{since}").splitlines()
    shown = ("Error", "reload:", "serve:", "plantstore-app@", "worker", "granian", "/livez")
    outcome["journal"] = [line[:300] for line in journal if any(part in line for part in shown)][-40:]
    return outcome


def settings_case(service: Deployed, design: str, token: str, rate: int, how: str) -> dict:
    service.configure(PLANTS_THROTTLE_RATE=f"{rate}/day")
    old = app_servers(service)
    command = {"reload": RELOAD[design], "restart": "systemctl restart plantstore"}[how]

    def action():
        started = time.monotonic()
        done = service.host.run(command, check=False)
        returned = time.monotonic()
        gone = wait_gone(service, old)
        return {
            "exit": done.returncode,
            "reload_s": round(returned - started, 2),
            "old_gone_s": round(gone - started, 2),
        }

    outcome = under_load(service, token, action)
    answer = service.create(Ids.next, token)
    Ids.next += 1
    outcome["policy"] = answer[1]["RateLimit-Policy"] if answer[1] else None
    outcome["applied"] = bool(answer[1]) and f"q={rate};" in answer[1]["RateLimit-Policy"]
    return outcome


def measure(service: Deployed, design: str, runs: int) -> dict:
    install(service, design)
    token = service.token(f"{design}-client")
    results = {"reload": [], "broken": [], "refused": [], "settings": [], "settings_restart": []}
    releases = ["r2", "r1"]
    for run in range(runs):
        results["reload"].append(reload_case(service, design, token, releases[run % 2]))
        say(design, "reload", results["reload"][-1])
    current = releases[(runs - 1) % 2]
    for run in range(max(1, runs // 3)):
        for case, release in (("broken", "broken"), ("refused", "typo")):
            results[case].append(refused_case(service, design, token, release, current))
            say(design, case, results[case][-1])
        results["settings"].append(settings_case(service, design, token, RATE - 1 - run, "reload"))
        say(design, "settings", results["settings"][-1])
        if design == "supervisor":
            results["settings_restart"].append(settings_case(service, design, token, RATE - 100 - run, "restart"))
            say(design, "settings by restart", results["settings_restart"][-1])
    service.configure(PLANTS_THROTTLE_RATE=f"{RATE}/day")
    return results


def costs(service: Deployed) -> dict:
    """What systemd shows of the alternative's processes, how it rates their exposure, and whether
    the enabled slot and nginx are back after the host restarts."""
    host = service.host
    security = {
        unit: host.run(f"systemd-analyze security --no-pager {unit} 2>&1 | tail -n 1", check=False).stdout.strip()
        for unit in ("plantstore-app@a", "plantstore-app@b", "nginx", "plantstore")
    }
    since = service.now()
    traced = request(f"{service.url}/plants", method="TRACE", proxy="127.0.0.1")[0]  # nginx answers it alone
    time.sleep(1)
    edge_lines = service.host.journal("-t nginx -o cat", f"--since=@{since}").splitlines()
    token = service.token("restart-client")
    host.restart()
    healthy = service.wait_healthy()
    after_restart = {
        "healthy": healthy,
        "create": service.create(Ids.next, token)[0],
        "active": host.run("systemctl is-active nginx plantstore-app@a plantstore-app@b", check=False).stdout.split(),
        "order": host.run(
            "journalctl -b -o cat | grep -E '^(Started|Starting) (nginx|plantstore-app)' || true"
        ).stdout.splitlines(),
    }
    return {
        "trace": (traced, edge_lines),
        "security": security,
        "after_restart": after_restart,
        "status": host.run("systemctl status --no-pager plantstore-app@a plantstore-app@b nginx", check=False).stdout,
        "verify": host.run(
            "systemd-analyze verify /etc/systemd/system/plantstore-app@.service 2>&1", check=False
        ).stdout,
    }


def say(*parts) -> None:
    sys.stdout.write(" ".join(map(str, parts)) + "\n")
    sys.stdout.flush()


def main(runs: int, designs: list[str]) -> None:
    for host in booted_host():
        service = Deployed(host)
        prepare(service)
        results = {design: measure(service, design, runs) for design in designs}
        if designs[-1] != "supervisor":
            results["costs"] = costs(service)
        say(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3, sys.argv[2:] or ["supervisor", "alternative"])
