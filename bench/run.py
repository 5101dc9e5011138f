"""`make bench`: the service, a bare Django view and three peers side by side, each on its production
path (a unit of deploy/unit.py; the FastAPI peer under uvicorn behind the same nginx); each peer twice,
as written and doing the service's work besides (its equal-work variant: counting each request per
token in the database, one JSON log line per request). Run under scripts/with-postgres, PostgreSQL
durable (checked, or no run).

Throughput: wrk's closed loop in rotating rounds, each target's CPU per create counted with every
process a create uses (nginx, the app server, and PostgreSQL's postmaster and all its processes).
Latency: k6's open loop (bench/open_loop.py) at shares of each target's own throughput and at one
common rate for all. Keeps the raw figures (bench/runs.py), plots them (bench/plot.py), prints the
report and writes BENCHMARKS.md's section; a run shorter than the method's (a smoke run) writes
elsewhere and leaves BENCHMARKS.md alone.
"""

import functools
import json
import os
import platform
import secrets
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import open_loop, runs
from bench.cpu import cpu_seconds, parent
from bench.peers.json_log import REQUEST_LOGGER
from bench.report import write_section
from bench.servers import CLEAN_ENV, PEER_WORKERS, django_peer, fastapi_peer, service
from deploy.app_server import SETTINGS as APP_SETTINGS
from deploy.processes import ROOT
from deploy.unit import UPSTREAM_IDLE_S

# The method; each may be shortened for a smoke run, which then publishes nothing (FULL).
METHOD = {"rounds": 7, "seconds": 8, "latency_requests": 3000}
ROUNDS = int(os.environ.get("BENCH_ROUNDS", METHOD["rounds"]))
SECONDS = int(os.environ.get("BENCH_SECONDS", METHOD["seconds"]))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 16))
FULL = (
    all(value >= least for value, least in zip((ROUNDS, SECONDS, open_loop.MIN_REQUESTS), METHOD.values(), strict=True))
    and CONNECTIONS == 16
)
# Open loop: each target at these shares of its own median throughput (wrk's); the table shows 50% and
# 80%, the plot all. Then every target at one common rate, COMMON_SHARE of the service's throughput.
TABLE_SHARES = (0.5, 0.8)
LOAD_SHARES = tuple(
    sorted(
        {float(s) for s in os.environ.get("BENCH_LOAD_SHARES", "0.25,0.5,0.8,0.95,1.1").split(",")} | set(TABLE_SHARES)
    )
)
COMMON_SHARE = 0.5
# Where a run keeps its raw figures, plot and report: beside BENCHMARKS.md for a full run, else a
# folder of its own (bench/runs.py holds runs of one method together).
SMOKE_RESULTS = Path(os.environ.get("TMPDIR", "/tmp")) / "plantstore-bench-smoke"


def results_folder(run: dict) -> Path:
    return Path(os.environ.get("BENCH_RESULTS") or (ROOT / "benchmarks" if run["method"]["full"] else SMOKE_RESULTS))


LOAD_PYTHON = os.environ.get("BENCH_LOAD_PYTHON", str(ROOT / ".venv" / "load" / "bin" / "python"))  # matplotlib's
WRK_THREADS = 2
# name: (server, path, column heading); the service's throughput is compared with the others'.
TARGETS = {
    "service": ("service", "/plants", "service `POST /plants` (`make serve`: nginx, Granian)"),
    "bare": ("service", "/bench/bare-plants", "bare Django view (the same unit)"),
    "fastapi": ("fastapi", "/plants", "FastAPI peer (uvicorn)"),
    "drf": ("drf", "/plants", "DRF peer (ModelSerializer, its uniqueness SELECT)"),
    "ninja": ("ninja", "/plants", "django-ninja peer"),
    "fastapi+": ("fastapi+", "/plants", "FastAPI peer, equal work"),
    "drf+": ("drf+", "/plants", "DRF peer, equal work, no uniqueness SELECT"),
    "ninja+": ("ninja+", "/plants", "django-ninja peer, equal work"),
}
# The equal-work targets, each with the prefix of its count's key in plants_ratelimitcounter
# (bench/peers/rate_limit.py, bench/peers/fastapi_app.py): each must count and log every request once.
EQUAL_WORK = {"fastapi+": "fastapi:", "drf+": "drf:", "ninja+": "ninja:"}
LOG_DIR = Path(os.environ.get("TMPDIR", "/tmp"))
# Each load run takes its own block of ids (bench/create.lua adds 10**9 per wrk thread; bench/create.js
# counts up from its base), so no two requests of a benchmark share an id; blocks stay far below 2**53,
# where Lua's and JavaScript's doubles stop counting exactly.
ID_BLOCK = 10**11
DURABILITY = ("fsync", "full_page_writes", "synchronous_commit")


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
# The service's settings, on a cleared environment (bench/servers.py: CLEAN_ENV): nothing else of the
# shell that ran the bench reaches it.
ENV = {
    **CLEAN_ENV,
    "DATABASE_URL": os.environ.get("DATABASE_URL", ""),
    "DJANGO_SETTINGS_MODULE": "bench.settings",
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    # The public host name alone, as .env.example has it: the load names it (bench/create.lua, create.js).
    "DJANGO_ALLOWED_HOSTS": BENCH_HOST,
    # Throttling stays on, at a rate the load never reaches, so its cost is measured: in the
    # default store, the database (plants/rate_stores.py).
    "PLANTS_THROTTLE_RATE": "100000000/second",
    # A direct connection to PostgreSQL, its statements prepared (.env.example leaves them off, for a
    # pooler an operator may put in front later): on for every Django target alike, below.
    "DJANGO_DB_PREPARED_STATEMENTS": "1",
    "APP_PROCESSES": APP_SETTINGS["APP_PROCESSES"],
    "APP_THREADS": APP_SETTINGS["APP_THREADS"],
}


def durability(url: str | None = None) -> dict[str, str]:
    """PostgreSQL's own word (SHOW) on each durability setting, from the server at `url` (the bench's)."""
    if url is None:
        return {name: psql(f"SHOW {name}") for name in DURABILITY}
    with psycopg.connect(url, autocommit=True, connect_timeout=5) as connection:
        return {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in DURABILITY}


def require_durable(when: str, url: str | None = None) -> dict[str, str]:
    """durability(url), or SystemExit if any setting is off: no run is reported on a server that is not durable."""
    settings = durability(url)
    if any(value != "on" for value in settings.values()):
        found = ", ".join(f"{name}={value}" for name, value in settings.items())
        raise SystemExit(f"bench: PostgreSQL is not durable {when} ({found}): no run is reported so (PG_DURABLE=1)")
    return settings


def environment_names(pid: int) -> list[str]:
    """The names (never the values: a secret key is one) of the variables a target's app server runs with."""
    return sorted(
        entry.split(b"=", 1)[0].decode() for entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0") if entry
    )


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
        env={**CLEAN_ENV, "BENCH_TOKEN": token, "BENCH_ID_BASE": str(id_base), "BENCH_HOST": BENCH_HOST},
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
    durable = require_durable("at the start")
    token = prepare("bench")
    started = datetime.now(UTC)
    postmaster = parent(int(psql("SELECT pg_backend_pid()")))
    servers = {}
    try:
        servers["service"] = service(LOG_DIR, **ENV).start()
        print(f"the service's log: {servers['service'].log_path}", flush=True)
        peer_env = {name: ENV[name] for name in ("DATABASE_URL", "DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS")}
        # The service's Granian settings, and its database's: statements prepared on every Django target.
        peer_env |= {name: ENV[name] for name in ("APP_PROCESSES", "APP_THREADS", "DJANGO_DB_PREPARED_STATEMENTS")}
        for equal_work in (False, True):
            peers = [
                fastapi_peer(LOG_DIR, ENV["DATABASE_URL"], equal_work),
                *(django_peer(p, LOG_DIR, equal_work, **peer_env) for p in ("drf", "ninja")),
            ]
            for peer in peers:
                servers[peer.name] = peer.start()
        rounds = run_rounds(servers, token, postmaster)
        capacity = {name: statistics.median(f["rps"] for f in figures) for name, figures in rounds.items()}
        points = open_loop_points(servers, token, capacity)
        peak_rss = {name: worker_peak_rss_mib(server) for name, server in servers.items()}
        environments = {name: environment_names(server.app.process.pid) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    run = {
        "when": f"{started:%Y-%m-%dT%H:%MZ}",
        "minutes": round((datetime.now(UTC) - started).total_seconds() / 60, 1),
        "code": runs.code_version(),
        "machine": machine(),
        "database": {"at the start": durable, "at the end": require_durable("at the end")},
        "method": {
            "full": FULL,
            "rounds": ROUNDS,
            "seconds": SECONDS,
            "connections": CONNECTIONS,
            "wrk_threads": WRK_THREADS,
            "load_shares": LOAD_SHARES,
            "common_share": COMMON_SHARE,
            "latency_requests": open_loop.MIN_REQUESTS,
            "latency_min_seconds": open_loop.MIN_SECONDS,
            "achieved_share": open_loop.ACHIEVED_SHARE,
        },
        "targets": {
            name: {"server": server, "path": path, "heading": heading}
            for name, (server, path, heading) in TARGETS.items()
        },
        "rounds": rounds,
        "open_loop": points,
        "peak_rss_mib": {name: peak_rss[server] for name, (server, *_) in TARGETS.items()},
        "environment": {name: environments[server] for name, (server, *_) in TARGETS.items()},
    }
    publish(run)


def run_rounds(servers: dict, token: str, postmaster: int) -> dict[str, list[dict]]:
    """Each target's figures in each round: wrk's, the rows it stored, the statements it ran, and the
    CPU time of its unit and of PostgreSQL while it ran. Each run starts from a CHECKPOINT and ends
    with one inside its CPU window, so that the checkpointer's writing of its pages is charged to it."""
    urls = {name: servers[server].url + path for name, (server, path, _) in TARGETS.items()}
    results = {name: [] for name in urls}
    id_base = 0
    for url in urls.values():  # warm-up: imports, connections, caches
        wrk(url, token, id_base := id_base + ID_BLOCK, 3)
    psql("CHECKPOINT")
    for round_number in range(ROUNDS):
        # Rotate which goes first, so none always meets the fuller table or warmer caches.
        names = list(urls)
        for position, name in enumerate(names[round_number % len(names) :] + names[: round_number % len(names)]):
            psql("SELECT pg_stat_statements_reset()")
            server = servers[TARGETS[name][0]]
            server_pids = server.pids()
            work_before = work_done(name, server)
            server_before, database_before = cpu_seconds(server_pids), cpu_seconds([postmaster])
            figures = wrk(urls[name], token, id_base := id_base + ID_BLOCK, SECONDS)
            figures["cpu_server_s"] = cpu_seconds(server_pids) - server_before
            figures["statements"] = int(psql(STATEMENTS))
            psql("CHECKPOINT")
            figures["cpu_database_s"] = cpu_seconds([postmaster]) - database_before
            figures["round"], figures["position"] = round_number + 1, position + 1
            figures["stored"] = rows_stored(id_base)
            if figures["stored"] < figures["requests"] - figures["non_2xx"]:
                raise SystemExit(f"bench: {name} answered 2xx for more plants than it stored; see its log")
            if name in EQUAL_WORK:
                figures["counted"], figures["logged"] = check_equal_work(name, server, work_before, figures["requests"])
            results[name].append(figures)
            print(f"round {round_number + 1} {name:9} {figures['rps']:6.0f} req/s, CPU per create "
                  f"{figures['cpu_server_s'] / figures['requests'] * 1e6:5.0f} + "
                  f"{figures['cpu_database_s'] / figures['requests'] * 1e6:5.0f} µs (PostgreSQL)", flush=True)  # fmt: skip
    return results


def open_loop_points(servers: dict, token: str, capacity: dict) -> list[dict]:
    """k6's open loop (bench/open_loop.py) at each of LOAD_SHARES of each target's own median throughput,
    then at the common rate for all: one point each, ascending, the targets' order reversed at each
    step; each point after a CHECKPOINT, so that none pays for the dirty pages of the one before."""
    common = COMMON_SHARE * capacity["service"]
    plan = [[(name, share * capacity[name], share, False) for name in TARGETS] for share in LOAD_SHARES]
    plan.append([(name, common, None, True) for name in TARGETS])
    total = sum(open_loop.point_seconds(rate) + 3 for step in plan for _, rate, *_ in step)
    print(f"open loop: {sum(map(len, plan))} points, about {total / 60:.0f} minutes", flush=True)
    points = []
    for index, step in enumerate(plan):
        for name, rate, share, is_common in step[:: -1 if index % 2 else 1]:
            server, path, _ = TARGETS[name]
            id_base = ID_BLOCK * (1000 + len(points))
            psql("CHECKPOINT")
            point = open_loop.k6(servers[server].url + path, token, BENCH_HOST, id_base, rate)
            point |= {"target": name, "share": share, "common": is_common, "stored": rows_stored(id_base)}
            if point["stored"] < point["sent"] - point["failed"]:
                raise SystemExit(f"bench: {name} answered 2xx for more plants than it stored; see its log")
            points.append(point)
            print(f"open loop {name:9} {point['offered']:5}/s offered, {point['achieved']:6.1f}/s answered: p50 "
                  f"{point['p50_ms']:.1f} ms, p99 {point['p99_ms']:.1f} ms, {point['failed']} failed, {point['dropped']} "
                  f"dropped{', SATURATED' if point['saturated'] else ''}", flush=True)  # fmt: skip
    return points


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


def rows_stored(id_base: int) -> int:
    """Plants stored in a load run's block of ids: each 2xx answer must have stored one."""
    return int(psql(f"SELECT count(*) FROM plants_plant WHERE id > {id_base} AND id <= {id_base + ID_BLOCK}"))


def publish(run: dict) -> None:
    """Keep the raw figures, plot them, print the report; a full run also rewrites BENCHMARKS.md's section
    (its report and plot beside the raw figures in benchmarks/). A smoke run publishes nothing."""
    results = results_folder(run)
    raw = runs.save(run, results)
    plot = results / "make-bench.png"
    subprocess.run([LOAD_PYTHON, "-m", "bench.plot", str(raw), str(plot)], cwd=ROOT, check=True)
    full_report = report(run)
    (results / "make-bench.md").write_text("\n".join(full_report) + "\n")
    summary = section(run, runs.held_runs(results, run), raw, plot)
    print("\n".join(full_report + [""] + summary))
    if run["method"]["full"]:
        write_section("make bench", "\n".join(summary))
    else:
        print(f"\nA smoke run (shorter than the method): BENCHMARKS.md left alone; its files are in {results}")
    failed = targets_with_errors(run)
    if failed:
        raise SystemExit(f"bench: {', '.join(failed)} answered errors; see the server logs, then rerun")


def targets_with_errors(run: dict) -> list[str]:
    """The targets that answered an error where a ratio or a latency rests on their answers: in a
    throughput round, or at an open-loop point they kept up with. Such a target did less work than a
    real create, and its figures mean nothing. A saturated point is overload on purpose (95% and 110%
    of its capacity): its errors (the database bound's 503s) are what overload answers, shown in its row."""
    return [
        name
        for name in TARGETS
        if any(f["non_2xx"] or f["socket_errors"] for f in run["rounds"][name])
        or any(p["failed"] for p in run["open_loop"] if p["target"] == name and not p["saturated"])
    ]


def point_cell(run: dict, name: str, share: float | None) -> str:
    point = next(
        p for p in run["open_loop"] if p["target"] == name and (p["common"] if share is None else p["share"] == share)
    )
    flag = " sat." if point["saturated"] else ""
    return f"{point['offered']}/s: {point['p50_ms']:.0f} / {point['p99_ms']:.0f} ms{flag}"


def target_rows(run: dict) -> list[str]:
    """One row per target: throughput, open-loop latency, CPU per create, statements per create."""
    lines = [
        f"| target | requests/s, median of {run['method']['rounds']} rounds (min–max) | open loop p50 / p99: at 50% "
        f"of its own | at 80% of its own | at the common rate | CPU µs per create: app and nginx + PostgreSQL = all "
        "| SQL statements per create |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in TARGETS:
        rates = runs.per_round(run, name, "rps")
        server = statistics.median(runs.cpu_per_create(run, name, False))
        everything = statistics.median(runs.cpu_per_create(run, name))
        statements = sum(f["statements"] for f in run["rounds"][name]) / sum(f["requests"] for f in run["rounds"][name])
        lines.append(
            f"| {TARGETS[name][2]} | {statistics.median(rates):.0f} ({min(rates):.0f}–{max(rates):.0f}) | "
            + " | ".join(point_cell(run, name, share) for share in (*TABLE_SHARES, None))
            + f" | {server:,.0f} + {everything - server:,.0f} = {everything:,.0f} | {statements:.2f} |"
        )
    return lines


def report(run: dict) -> list[str]:
    """The full report of one run (benchmarks/make-bench.md): every target, every figure, every estimator."""
    lines = [f"# make bench, {run['when']} UTC, {run['minutes']} minutes", "", *method_lines(run), ""]
    lines += [*target_rows(run), ""]
    lines += [
        "| target | closed-loop p50 / p99 (wrk, median of rounds) | non-2xx / socket errors | 2xx answers / rows "
        "stored | requests answered / counted / logged (equal work) | peak app worker memory (VmHWM) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in TARGETS:
        rounds = run["rounds"][name]
        answered = sum(f["requests"] - f["non_2xx"] for f in rounds)
        work = (
            " / ".join(str(sum(f.get(k) or 0 for f in rounds)) for k in ("requests", "counted", "logged"))
            if name in EQUAL_WORK
            else ""
        )
        lines.append(
            f"| {name} | {statistics.median(f['p50_us'] for f in rounds) / 1000:.1f} / "
            f"{statistics.median(f['p99_us'] for f in rounds) / 1000:.1f} ms | "
            f"{sum(f['non_2xx'] for f in rounds)} / {sum(f['socket_errors'] for f in rounds)} | "
            f"{answered} / {sum(f['stored'] for f in rounds)} | {work} | {run['peak_rss_mib'][name]:.0f} MiB |"
        )
    lines += ["", "Each target's app server ran with these variables alone (names; bench/servers.py: CLEAN_ENV):", ""]
    lines += [f"- {name}: {', '.join(f'`{n}`' for n in names)}" for name, names in run["environment"].items()]
    lines += ["", "Every estimator, this run:", "", *estimator_rows(run), "", "Every open-loop point:", ""]
    lines += [
        "| target | share of its own | offered /s | answered in the window /s | sent | failed | dropped | p50 | p90 "
        "| p99 | p99.9 | max | saturated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in run["open_loop"]:
        share = "common" if p["common"] else f"{p['share']:.0%}"
        lines.append(
            f"| {p['target']} | {share} | {p['offered']} | {p['achieved']:.1f} | {p['sent']} | {p['failed']} | "
            f"{p['dropped']} | {p['p50_ms']:.1f} | {p['p90_ms']:.1f} | {p['p99_ms']:.1f} | {p['p999_ms']:.1f} | "
            f"{p['max_ms']:.0f} | {'yes' if p['saturated'] else ''} |"
        )
    return lines


def estimator_rows(run: dict) -> list[str]:
    found = runs.headlines(run)
    lines = [
        "| headline | floor | ratio of medians | median of per-round ratios | per-round min–max |",
        "|---|---|---:|---:|---:|",
    ]
    for key, (label, floor) in runs.HEADLINES.items():
        value = found[key]
        lines.append(
            f"| {label} | {runs.floor_text(floor)} | {value['ratio_of_medians']:.2f} | {value['median_of_ratios']:.2f} "
            f"| {value['min']:.2f}–{value['max']:.2f} |"
        )
    return lines


def method_lines(run: dict) -> list[str]:
    method, database_settings = run["method"], run["database"]["at the start"]
    shares = ", ".join(f"{share:.0%}" for share in method["load_shares"])
    return [
        f"- Machine: {run['machine']}; commit {run['code']['commit'][:10]}"
        + (f" with uncommitted changes ({run['code']['uncommitted']})" if run["code"]["uncommitted"] else ""),
        f"- Service: `make serve`'s unit, nginx in front of Granian ({ENV['APP_PROCESSES']} processes × "
        f"{ENV['APP_THREADS']} threads), `bench.settings` (production's plus the bare view's URL, which the same "
        f"unit serves); peers behind the same nginx: FastAPI (uvicorn, {PEER_WORKERS} workers, uvloop, httptools, "
        f"access log off as Granian's, nginx upstream keep-alive {UPSTREAM_IDLE_S} s), DRF and django-ninja (the "
        "service's Granian settings); every target started from a cleared environment",
        "- Database: a throwaway PostgreSQL on 127.0.0.1, read back from the server at the start and at the end: "
        + ", ".join(f"`{name}={value}`" for name, value in database_settings.items()),
        f"- Throughput: `wrk -t{method['wrk_threads']} -c{method['connections']} -d{method['seconds']}s` on the same machine, "
        f"{method['rounds']} rounds of every target (rotating which goes first) after a warm-up; CPU per create "
        "counts the unit's processes (nginx, the app server) and PostgreSQL's (postmaster, backends, walwriter, "
        "checkpointer, ...), each run between two `CHECKPOINT`s",
        f"- Latency: k6's constant-arrival-rate (open loop, `bench/create.js`, on the same machine) at {shares} of each target's own "
        f"median throughput and at one common rate ({method['common_share']:.0%} of the service's); each point "
        f"{method['latency_requests']:,} requests or more ({method['latency_min_seconds']} s at least) after a "
        f"`CHECKPOINT`, latency from each request's scheduled start; saturated (marked) when a request was dropped "
        f"or under {method['achieved_share']:.0%} of the offered rate was answered within the window",
    ]


def section(run: dict, held: list[dict], raw: Path, plot: Path) -> list[str]:
    """BENCHMARKS.md's section: the held runs against the floors, the plot, the latest run's targets."""
    where = raw.parent.relative_to(ROOT) if raw.is_relative_to(ROOT) else raw.parent
    code = run["code"]["commit"][:10] + (" with uncommitted changes" if run["code"]["uncommitted"] else "")
    settings = ", ".join(f"`{name}={value}`" for name, value in run["database"]["at the start"].items())
    return [
        f"{len(held)} run{'s' if len(held) > 1 else ''} of this code ({code}; the newest {runs.RUNS_HELD} are "
        "held): each cell the run's ratio of medians over its rounds, and the range of its per-round ratios; "
        "the floors are judged on the median of the runs.",
        "",
        *runs.runs_table(held),
        "",
        f"![Throughput, and open-loop latency against offered load, per target]({where}/{plot.name})",
        "",
        f"The latest run, {run['when'][:10]} {run['when'][11:16]} UTC, {run['machine']}; the server's settings read "
        f"back at the start and the end: {settings}. Every figure, estimator and open-loop point: [{where}/make-bench.md]"
        f"({where}/make-bench.md); the raw figures of each round and point: [{where}/{raw.name}]({where}/{raw.name}).",
        "",
        *target_rows(run),
    ]


if __name__ == "__main__":
    main()
