"""`make bench`: the service, a bare Django view and three peers side by side, each on its production
path (a unit of deploy/unit.py; the FastAPI peer under uvicorn behind the same nginx), in rotating
rounds; each peer twice, as written and doing the service's work besides (its equal-work variant:
counting each request per token in the database, one JSON log line per request). Run under
scripts/with-postgres; prints the figures and writes them to BENCHMARKS.md.
"""

import csv
import functools
import json
import math
import os
import platform
import secrets
import statistics
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench.peers.json_log import REQUEST_LOGGER
from bench.report import write_section
from bench.servers import PEER_WORKERS, django_peer, fastapi_peer, service
from deploy.app_server import SETTINGS as APP_SETTINGS
from deploy.processes import ROOT
from deploy.unit import UPSTREAM_IDLE_S
from localcluster.processes import descendants

ROUNDS = int(os.environ.get("BENCH_ROUNDS", 7))
SECONDS = int(os.environ.get("BENCH_SECONDS", 8))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 16))
# Latency at a fixed offered load: each target gets the same constant rate, a share of the slowest
# target's throughput, from Locust (bench/locustfile.py) for LATENCY_SECONDS.
LOAD_SHARES = (0.5, 0.8)
LATENCY_SECONDS = int(os.environ.get("BENCH_LATENCY_SECONDS", 30))
# Each Locust user sends one create per interval: far above every answer's time, so the rate
# offered never waits for the server.
USER_INTERVAL_S = 0.1
LOCUST = os.environ.get("BENCH_LOCUST", str(ROOT / ".venv" / "load" / "bin" / "locust"))  # make bench: its venv's
WRK_THREADS = 2
# name: (server, path, column heading); the service's throughput is compared with the others'.
TARGETS = {
    "service": ("service", "/plants", "service `POST /plants` (`make serve`: nginx, Granian)"),
    "bare": ("service", "/bench/bare-plants", "bare Django view (the same unit)"),
    "fastapi": ("fastapi", "/plants", "FastAPI peer (nginx with upstream keep-alive, uvicorn)"),
    "drf": ("drf", "/plants", "DRF peer (nginx, the service's Granian settings)"),
    "ninja": ("ninja", "/plants", "django-ninja peer (nginx, the service's Granian settings)"),
    "fastapi+": ("fastapi+", "/plants", "FastAPI peer, counts and logs like the service (a dependency, a middleware)"),
    "drf+": ("drf+", "/plants", "DRF peer, counts and logs like the service (a throttle class, a middleware)"),
    "ninja+": ("ninja+", "/plants", "django-ninja peer, counts and logs like the service (a throttle, a middleware)"),
}
# The equal-work targets, each with the prefix of its count's key in plants_ratelimitcounter
# (bench/peers/rate_limit.py, bench/peers/fastapi_app.py): each must count and log every request once.
EQUAL_WORK = {"fastapi+": "fastapi:", "drf+": "drf:", "ninja+": "ninja:"}
LOG_DIR = Path(os.environ.get("TMPDIR", "/tmp"))
# Each wrk run takes its own block of ids (bench/create.lua adds 10**9 per wrk thread), so no two
# requests of a benchmark share an id; blocks stay far below 2**53, where Lua's doubles stop
# counting exactly.
ID_BLOCK = 10**11


def manage(*args: str, env: dict) -> str:
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, check=True, capture_output=True, text=True
    ).stdout


@functools.cache
def database() -> psycopg.Connection:
    return psycopg.connect(os.environ["DATABASE_URL"], autocommit=True)


def psql(sql: str) -> str:
    """The first column of the first row of `sql`, on one connection kept for the whole run."""
    cursor = database().execute(sql)
    row = cursor.fetchone() if cursor.description else None
    return str(row[0]) if row else ""


BENCH_HOST = "plants.example.com"
ENV = {
    **os.environ,
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    # The public host name alone, as .env.example has it: the load names it (bench/create.lua).
    "DJANGO_ALLOWED_HOSTS": BENCH_HOST,
    # Throttling stays on, at a rate the load never reaches, so its cost is measured: in the
    # default store, the database (plants/rate_stores.py).
    "PLANTS_THROTTLE_RATE": "100000000/second",
    # What production runs, whatever the shell exported.
    "APP_PROCESSES": APP_SETTINGS["APP_PROCESSES"],
    "APP_THREADS": APP_SETTINGS["APP_THREADS"],
}


def worker_peak_rss_mib(server) -> float:
    peaks = []
    for pid in server.worker_pids():
        status = Path(f"/proc/{pid}/status").read_text()
        peaks.append(int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]))
    return max(peaks) / 1024


def wrk(url: str, token: str, id_base: int, seconds: int, connections: int = CONNECTIONS) -> dict:
    result = subprocess.run(
        ["wrk", f"-t{WRK_THREADS}", f"-c{connections}", f"-d{seconds}s", "-s", "bench/create.lua", url],
        cwd=ROOT,
        env={**os.environ, "BENCH_TOKEN": token, "BENCH_ID_BASE": str(id_base), "BENCH_HOST": BENCH_HOST},
        check=True,
        capture_output=True,
        text=True,
    )
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    figures["rps"] = figures["requests"] / (figures["duration_us"] / 1e6)
    return figures


STATEMENTS = (
    "SELECT coalesce(sum(calls), 0) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
    "WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%'"
)


def machine() -> str:
    names = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
    cpu = names[0] if names else platform.processor()
    memory_kib = int(Path("/proc/meminfo").read_text().split()[1])
    return (
        f"{os.cpu_count()} cores ({cpu}), {memory_kib / 1024 / 1024:.0f} GiB, Linux {platform.release()}, "
        f"Python {platform.python_version()}, PostgreSQL {psql('SHOW server_version')}"
    )


def prepare(command: str) -> str:
    """Migrate the throwaway database, count its statements, and issue the token the load carries."""
    if "DATABASE_URL" not in os.environ:
        raise SystemExit(f"{command}: run under scripts/with-postgres (make {command})")
    manage("migrate", "--no-input", env=ENV)
    psql("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return manage("token", "issue", command, env=ENV).strip()


def main() -> None:
    token = prepare("bench")
    servers = {}
    try:
        servers["service"] = service(LOG_DIR, **ENV).start()
        print(f"the service's log: {servers['service'].log_path}", flush=True)
        for equal_work in (False, True):
            peers = [
                fastapi_peer(LOG_DIR, equal_work),
                *(django_peer(p, LOG_DIR, equal_work, **ENV) for p in ("drf", "ninja")),
            ]
            for peer in peers:
                servers[peer.name] = peer.start()
        rounds = run_rounds(servers, token)
        latency = fixed_rate_latency(servers, token, rounds)
        peak_rss = {name: worker_peak_rss_mib(server) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    report(rounds, latency, peak_rss)


def run_rounds(servers: dict, token: str) -> dict[str, list[dict]]:
    urls = {name: servers[server].url + path for name, (server, path, _) in TARGETS.items()}
    results = {name: [] for name in urls}
    id_base = 0
    for url in urls.values():  # warm-up: imports, connections, caches
        wrk(url, token, id_base := id_base + ID_BLOCK, 3)
    for round_number in range(ROUNDS):
        # Rotate which goes first, so none always meets the fuller table or warmer caches.
        names = list(urls)
        for name in names[round_number % len(names) :] + names[: round_number % len(names)]:
            psql("SELECT pg_stat_statements_reset()")
            server = servers[TARGETS[name][0]]
            server_pids = server.pids()
            work_before = work_done(name, server)
            cpu_before = cpu_seconds(server_pids)
            figures = wrk(urls[name], token, id_base := id_base + ID_BLOCK, SECONDS)
            figures["cpu_seconds"] = cpu_seconds(server_pids) - cpu_before
            figures["statements"] = int(psql(STATEMENTS))
            figures["stored"] = rows_stored(id_base)
            if figures["stored"] < figures["requests"] - figures["non_2xx"]:
                raise SystemExit(f"bench: {name} answered 2xx for more plants than it stored; see its log")
            if name in EQUAL_WORK:
                figures["counted"], figures["logged"] = check_equal_work(name, server, work_before, figures["requests"])
            results[name].append(figures)
            print(f"round {round_number + 1} {name:13} {figures['rps']:8.0f} req/s", flush=True)
    return results


def fixed_rate_latency(servers: dict, token: str, rounds: dict) -> dict[float, dict]:
    """{share: {target: figures}}: each target driven at `share` of the slowest target's median
    throughput, the same rate for all, one after another, in the opposite order at the next share.

    Each run starts from a CHECKPOINT, so that none pays for the dirty pages of the one before it
    (with fsync on, the first after wrk's rounds paid for all of theirs)."""
    slowest = min(statistics.median(f["rps"] for f in figures) for figures in rounds.values())
    found = {}
    for share_index, share in enumerate(LOAD_SHARES):
        found[share] = {}
        targets = list(enumerate(TARGETS.items()))
        for index, (name, (server, path, _)) in targets[:: -1 if share_index % 2 else 1]:
            id_base = ID_BLOCK * (1000 + 10 * share_index + index)
            psql("CHECKPOINT")
            found[share][name] = locust(servers[server].url, path, token, id_base, share * slowest)
            print(f"{share:.0%} load {name:13} p50 {found[share][name]['p50_ms']} ms, p99 "
                  f"{found[share][name]['p99_ms']} ms at {found[share][name]['rps']:.0f} req/s", flush=True)  # fmt: skip
    return found


def locust(url: str, path: str, token: str, id_base: int, rate: float, seconds: int = LATENCY_SECONDS) -> dict:
    """Locust offering `rate` creates a second to `url` for `seconds`: the rate served, p50 and p99."""
    users = max(1, math.ceil(rate * USER_INTERVAL_S))
    with tempfile.TemporaryDirectory(prefix="plantstore-locust.") as work_dir:
        prefix = Path(work_dir) / "figures"
        subprocess.run(
            [
                str(LOCUST),
                "-f",
                "bench/locustfile.py",
                "--headless",
                "--only-summary",
                "--host",
                url,
                f"--users={users}",
                f"--spawn-rate={users}",
                f"--run-time={seconds}s",
                f"--csv={prefix}",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "BENCH_TOKEN": token,
                "BENCH_ID_BASE": str(id_base),
                "BENCH_HOST": BENCH_HOST,
                "BENCH_PATH": path,
                "BENCH_INTERVAL_S": str(users / rate),
            },
        )  # fmt: skip; its exit status is 1 when a request failed: counted below
        with open(f"{prefix}_stats.csv") as file:
            total = next(row for row in csv.DictReader(file) if row["Name"] == "Aggregated")
    return {
        "offered": rate,
        "rps": float(total["Requests/s"]),
        "failures": int(total["Failure Count"]),
        "p50_ms": float(total["50%"]),
        "p99_ms": float(total["99%"]),
    }


def work_done(name: str, server) -> tuple[int, int | None, int]:
    """An equal-work target's count so far, the window it is in, and its log's size; nothing for the others."""
    if name not in EQUAL_WORK:
        return 0, None, 0
    count, window_start = (
        database()
        .execute(
            "SELECT coalesce(sum(count), 0), max(window_start) FROM plants_ratelimitcounter WHERE key LIKE %s",
            [EQUAL_WORK[name] + "%"],
        )
        .fetchone()
    )
    return int(count), window_start, server.log_path.stat().st_size


def check_equal_work(name: str, server, before: tuple, answered: int) -> tuple[int | None, int]:
    """(requests counted, JSON lines logged) since `before`: each must lie between the requests wrk saw
    answered and those plus its connections (requests still in flight when it stopped), or the target
    did not count or log every request once. The count is None when a new window began meanwhile."""
    count, window_start, _ = work_done(name, server)
    counted = count - before[0] if window_start == before[1] else None
    with server.log_path.open("rb") as log:
        log.seek(before[2])
        logged = sum(f'"logger": "{REQUEST_LOGGER}"'.encode() in line for line in log.read().splitlines())
    for what, found in (("counted", counted), ("logged", logged)):
        if found is not None and not answered <= found <= answered + CONNECTIONS:
            raise SystemExit(f"bench: {name} {what} {found} requests of the {answered} it answered; see its log")
    return counted, logged


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user and system) of a server: its processes and all their descendants."""
    total = 0
    for pid in [*pids, *(child for parent in pids for child in descendants(parent))]:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:  # exited meanwhile
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def rows_stored(id_base: int) -> int:
    """Plants stored in a round's block of ids: each 2xx answer must have stored one."""
    return int(psql(f"SELECT count(*) FROM plants_plant WHERE id > {id_base} AND id <= {id_base + ID_BLOCK}"))


def summarize(figures: list[dict]) -> dict:
    requests = sum(f["requests"] for f in figures)
    return {
        "rps": statistics.median(f["rps"] for f in figures),
        "p50_ms": statistics.median(f["p50_us"] for f in figures) / 1000,
        "p99_ms": statistics.median(f["p99_us"] for f in figures) / 1000,
        "non_2xx": sum(f["non_2xx"] for f in figures),
        "socket_errors": sum(f["socket_errors"] for f in figures),
        "statements": sum(f["statements"] for f in figures) / requests,
        "cpu_us": sum(f["cpu_seconds"] for f in figures) / requests * 1e6,
        "stored": sum(f["stored"] for f in figures),
        "answered_2xx": requests - sum(f["non_2xx"] for f in figures),
        "requests": requests,
        "counted": sum(f.get("counted") or 0 for f in figures),
        "logged": sum(f.get("logged", 0) for f in figures),
    }


def ratio(rounds: dict, name: str, other: str) -> float:
    # The ratio of each round's pair, then the median: the machine's drift between rounds cancels.
    return statistics.median(s["rps"] / o["rps"] for s, o in zip(rounds[name], rounds[other], strict=True))


def report(rounds: dict, latency: dict, peak_rss: dict) -> None:
    figures = {name: summarize(rounds[name]) for name in TARGETS}
    rss = {name: peak_rss[server] for name, (server, *_) in TARGETS.items()}
    columns = list(TARGETS)

    def row(label: str, cell) -> str:
        return f"| {label} | " + " | ".join(cell(name) for name in columns) + " |"

    rows = [
        row("", lambda n: TARGETS[n][2]),
        row("---", lambda n: "---"),
        row(f"requests/s (median of {ROUNDS} rounds)", lambda n: f"{figures[n]['rps']:.0f}"),
        row("latency p50", lambda n: f"{figures[n]['p50_ms']:.2f} ms"),
        row("latency p99", lambda n: f"{figures[n]['p99_ms']:.2f} ms"),
        *(
            row(
                f"open loop, {share:.0%} of the slowest's rate ({latency[share]['service']['offered']:.0f}/s): p50 / p99",
                lambda n, share=share: f"{latency[share][n]['p50_ms']:.0f} / {latency[share][n]['p99_ms']:.0f} ms",
            )
            for share in LOAD_SHARES
        ),  # fmt: skip
        row(
            "non-2xx answers",
            lambda n: str(figures[n]["non_2xx"] + sum(latency[s][n]["failures"] for s in LOAD_SHARES)),
        ),
        row("socket errors", lambda n: str(figures[n]["socket_errors"])),
        row("2xx answers / rows stored", lambda n: f"{figures[n]['answered_2xx']} / {figures[n]['stored']}"),
        row("server CPU per request (all its processes, nginx's included)", lambda n: f"{figures[n]['cpu_us']:.0f} µs"),
        row("SQL statements per create", lambda n: f"{figures[n]['statements']:.2f}"),
        row(
            "requests answered / counted / logged (equal work)",
            lambda n: (
                " / ".join(str(figures[n][k]) for k in ("requests", "counted", "logged")) if n in EQUAL_WORK else ""
            ),
        ),
        row("peak app worker memory (VmHWM)", lambda n: f"{rss[n]:.0f} MiB"),
    ]
    peer_p99 = figures["fastapi"]["p99_ms"]
    summary = [
        f"**Service ÷ FastAPI peer: {ratio(rounds, 'service', 'fastapi'):.2f}**, p99 "
        f"{figures['service']['p99_ms']:.1f} ms against the peer's {peer_p99:.1f} ms "
        f"({figures['service']['p99_ms'] / peer_p99:.1f} ×, closed loop); "
        f"**service ÷ DRF peer {ratio(rounds, 'service', 'drf'):.2f}**; **service ÷ django-ninja peer "
        f"{ratio(rounds, 'service', 'ninja'):.2f}**; "
        f"service ÷ bare view: {ratio(rounds, 'service', 'bare'):.2f}. At the same offered load "
        f"(open loop, {LOAD_SHARES[0]:.0%} of the slowest target's rate), **p99 ÷ the FastAPI peer's: "
        f"{latency[LOAD_SHARES[0]]['service']['p99_ms'] / latency[LOAD_SHARES[0]]['fastapi']['p99_ms']:.1f} ×**. "
        "Each throughput ratio is the median of "
        "the rounds' ratios: the machine is shared, so absolute figures drift between rounds, and a ratio "
        "taken within a round cancels most of that.",
        f"**CPU per create ÷ the bare view's: {figures['service']['cpu_us'] / figures['bare']['cpu_us']:.2f} ×** "
        f"({figures['service']['cpu_us']:.0f} against {figures['bare']['cpu_us']:.0f} µs, every process of the unit). "
        f"**SQL statements per authenticated create: {figures['service']['statements']:.2f}**, "
        "counted by PostgreSQL's pg_stat_statements, transaction statements included: the token lookup, the "
        "rate-limit count and the INSERT.",
        f"**On equal work** (each peer also counts every request against a per-token limit with one atomic "
        "statement in the service's UNLOGGED table and writes one JSON log line, as the service does): "
        f"**service ÷ DRF peer {ratio(rounds, 'service', 'drf+'):.2f}, ÷ django-ninja peer "
        f"{ratio(rounds, 'service', 'ninja+'):.2f}, ÷ FastAPI peer {ratio(rounds, 'service', 'fastapi+'):.2f}**.",
        "Rows stored are counted in the database after each run (a run's in-flight requests may add a few); "
        "so are the equal-work peers' counts, and their JSON lines in their logs.",
    ]
    print("\n".join(rows + [""] + summary))
    section = [
        f"- When: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"- Machine: {machine()}",
        f"- Service: `make serve`'s production unit: nginx (`deploy/nginx.conf`) in front of Granian "
        f"(`deploy/app_server.py`: {ENV['APP_PROCESSES']} processes × {ENV['APP_THREADS']} threads, nginx's upstream "
        "keep-alive), debug off, `bench.settings` (production settings plus the bare view's URL); "
        "the bare view is served by the same unit",
        "- Peers: `bench/peers/fastapi_app.py` (FastAPI, strict pydantic v2, asyncpg; uvicorn, "
        f"{PEER_WORKERS} workers, uvloop, httptools, behind the same nginx with upstream keep-alive, "
        f"`keepalive_timeout {UPSTREAM_IDLE_S}s`), `bench/peers/drf_peer` (ModelSerializer, a bearer "
        "authentication class reading the token row by its digest) and `bench/peers/ninja_peer` (a pydantic "
        "Schema, HttpBearer), both with startproject's apps and middleware and the service's Granian settings; "
        'each also as its equal-work variant (`PEER_EQUAL_WORK=1`, the columns marked "counts and logs like the '
        'service"): a per-token fixed-window count, one upsert per request in `plants_ratelimitcounter` '
        "(the service's table, UNLOGGED; DRF: a `BaseThrottle` subclass, django-ninja: a `ninja.throttling` "
        "throttle, FastAPI: a dependency), and one JSON line per request through Python's logging from a "
        "middleware, to the unit's log as the service's (uvicorn's access log off there)",
        "- CPU per request counts every process of the target: nginx's and the app server's",
        "- Database: a throwaway PostgreSQL on 127.0.0.1 (TCP), durable as production runs it (`fsync`, "
        "`full_page_writes` and `synchronous_commit` on), pg_stat_statements loaded",
        f"- Load: `wrk -t{WRK_THREADS} -c{CONNECTIONS} -d{SECONDS}s -s bench/create.lua`, on the same machine; "
        f"{ROUNDS} rounds, each running all {len(TARGETS)} (rotating which goes first), after a warm-up of each",
        f"- Latency at a fixed load: Locust (`bench/locustfile.py`, its own venv), each user one create every "
        f"{USER_INTERVAL_S * 1000:.0f} ms on its own schedule, {LATENCY_SECONDS} s per target at "
        f"{', '.join(f'{share:.0%}' for share in LOAD_SHARES)} of the slowest target's median throughput "
        "(Locust rounds times above 100 ms to 10 ms), each run after a `CHECKPOINT`, the second share's "
        "targets in the opposite order",
        "- Each request creates a new plant (unique ids) with a real bearer token, looked up on every request; "
        "the bare view is `json.loads`, `Plant.objects.create`, `JsonResponse` through the same middleware.",
        "",
        *rows,
        "",
        *summary,
    ]
    write_section("make bench", "\n".join(section))
    failed = [
        name
        for name in TARGETS
        if name != "service"
        and (
            figures[name]["non_2xx"]
            or figures[name]["socket_errors"]
            or any(latency[s][name]["failures"] for s in LOAD_SHARES)
        )
    ]
    if failed:
        # A baseline that failed requests did less work than a real create: the ratio means nothing.
        raise SystemExit(f"bench: {', '.join(failed)} answered errors; see the server logs, then rerun")


if __name__ == "__main__":
    main()
