"""`make bench`: the service, a bare Django view and three peers side by side, each on its production path (a
unit of deploy/unit.py, every Python target on Granian behind the same nginx); each peer twice, as written and
doing the service's work besides (its equal-work variant: counting each request per token in the database, one
JSON log line per request). Run under scripts/with-postgres, PostgreSQL durable (checked, or no run).

Throughput: wrk's closed loop in rotating rounds, each target's CPU per create counted with every process a create
uses (nginx, the app server, PostgreSQL's postmaster and all its processes). Latency: k6's open loop
(bench/open_loop.py) at shares of each target's own throughput, then at one common rate for all, a longer point;
the targets' order shuffled from a printed seed (BENCH_SEED replays it). Keeps the raw figures (bench/runs.py),
plots them (bench/plot.py), prints the report and writes BENCHMARKS.md's section; a run shorter than the
method's (a smoke run) writes elsewhere and leaves BENCHMARKS.md alone.
"""

import functools
import json
import os
import platform
import random
import secrets
import statistics
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import psycopg

from bench import open_loop, runs
from bench.cpu import cpu_seconds, parent, status_kib
from bench.peers.shared import REQUEST_LOGGER
from bench.servers import CLEAN_ENV, peer, unit
from deploy.app_server import SETTINGS as APP_SETTINGS
from deploy.processes import ROOT

# The method; each may be shortened for a smoke run, which then publishes nothing (FULL).
METHOD = {"rounds": 7, "seconds": 8, "latency_requests": 3000, "common_requests": 10_000}
ROUNDS = int(os.environ.get("BENCH_ROUNDS", METHOD["rounds"]))
SECONDS = int(os.environ.get("BENCH_SECONDS", METHOD["seconds"]))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 16))
# The common-rate point rests its p99 on 100 answers or more; a shortened BENCH_LATENCY_REQUESTS
# shortens it in proportion.
COMMON_REQUESTS = int(
    os.environ.get("BENCH_COMMON_REQUESTS")
    or METHOD["common_requests"] * open_loop.MIN_REQUESTS // METHOD["latency_requests"]
)
FULL = CONNECTIONS == 16 and all(
    value >= least
    for value, least in zip((ROUNDS, SECONDS, open_loop.MIN_REQUESTS, COMMON_REQUESTS), METHOD.values(), strict=True)
)
# Open loop: each target at these shares of its own median throughput (wrk's); the table shows 50% and
# 80%, the plot all. Then every target at one common rate, COMMON_SHARE of the service's throughput: a
# rate of its own (no target's 50% point), COMMON_REQUESTS requests each.
TABLE_SHARES = (0.5, 0.8)
SHARES = os.environ.get("BENCH_LOAD_SHARES", "0.25,0.5,0.8,0.95,1.1")
LOAD_SHARES = tuple(sorted({float(share) for share in SHARES.split(",")} | set(TABLE_SHARES)))
COMMON_SHARE = 0.4
# The open loop's order of targets, shuffled at each step from this seed (printed; BENCH_SEED replays it).
SEED = int(os.environ.get("BENCH_SEED") or secrets.randbelow(10**6))
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
    "fastapi": ("fastapi", "/plants", "FastAPI peer (Granian's ASGI, asyncpg's pool)"),
    "drf": ("drf", "/plants", "DRF peer (ModelSerializer, its uniqueness SELECT)"),
    "ninja": ("ninja", "/plants", "django-ninja peer"),
    "fastapi+": ("fastapi+", "/plants", "FastAPI peer, equal work"),
    "drf+": ("drf+", "/plants", "DRF peer, equal work, no uniqueness SELECT"),
    "ninja+": ("ninja+", "/plants", "django-ninja peer, equal work"),
}
# The equal-work targets, each with the prefix of its count's key in plants_ratelimitcounter
# (bench/peers/shared.py): each must count and log every request once.
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
    # Statements prepared on every Django target alike, set here whatever .env.example has (asyncpg
    # prepares the FastAPI peer's): bench/peers/settings.py reads it as the service's settings do.
    "DJANGO_DB_PREPARED_STATEMENTS": "1",
    "APP_PROCESSES": APP_SETTINGS["APP_PROCESSES"],
    "APP_THREADS": APP_SETTINGS["APP_THREADS"],
}


def peer_settings(name: str) -> dict[str, str]:
    """A peer's settings: the service's Granian settings and database; a Django peer's also the service's Django
    settings, its statements prepared as the service's (ENV), whatever .env.example has."""
    names = ("DATABASE_URL", "APP_PROCESSES", "APP_THREADS")
    django = ("DJANGO_SECRET_KEY", "DJANGO_ALLOWED_HOSTS", "DJANGO_DB_PREPARED_STATEMENTS")
    return {key: ENV[key] for key in names + (() if name == "fastapi" else django)}


def durability(url: str | None = None) -> dict[str, str]:
    """PostgreSQL's own word (SHOW) on each durability setting, from the server at `url` (the bench's)."""
    with psycopg.connect(url or os.environ["DATABASE_URL"], autocommit=True, connect_timeout=5) as connection:
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
    return max(status_kib(pid, "VmHWM") for pid in server.worker_pids()) / 1024


def wrk_load(url: str, token: str, id_base: int, seconds: int, connections: int = CONNECTIONS) -> subprocess.Popen:
    """wrk's closed loop on `url` (bench/create.lua), started; wrk_figures waits for its figures."""
    command = ["wrk", f"-t{WRK_THREADS}", f"-c{connections}", f"-d{seconds}s", "-s", "bench/create.lua", url]
    environment = {**CLEAN_ENV, "BENCH_TOKEN": token, "BENCH_ID_BASE": str(id_base), "BENCH_HOST": BENCH_HOST}
    return subprocess.Popen(command, cwd=ROOT, env=environment, stdout=subprocess.PIPE, text=True)


def wrk_figures(load: subprocess.Popen) -> dict:
    output = load.communicate()[0]
    if load.returncode:
        raise SystemExit(f"bench: wrk exited {load.returncode}")
    figures = json.loads(output.strip().splitlines()[-1])
    return figures | {"rps": figures["requests"] / (figures["duration_us"] / 1e6)}


def wrk(url: str, token: str, id_base: int, seconds: int, connections: int = CONNECTIONS) -> dict:
    return wrk_figures(wrk_load(url, token, id_base, seconds, connections))


STATEMENTS = (
    "SELECT s.query, sum(s.calls)::bigint FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
    "WHERE d.datname = current_database() AND s.query NOT ILIKE '%pg_stat_statements%' GROUP BY s.query"
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
    started, code = datetime.now(UTC), runs.code_version()  # the code as it starts, whatever is committed meanwhile
    postmaster = parent(int(psql("SELECT pg_backend_pid()")))
    servers = {}
    try:
        servers["service"] = unit("service", LOG_DIR, **ENV).start()
        print(f"the service's log: {servers['service'].log_path}", flush=True)
        for name in ("fastapi", "drf", "ninja"):
            for equal_work in (False, True):
                target = peer(name, LOG_DIR, equal_work, **peer_settings(name))
                servers[target.name] = target.start()
        rounds = run_rounds(servers, token, postmaster)
        capacity = {name: statistics.median(f["rps"] for f in figures) for name, figures in rounds.items()}
        points = open_loop_points(servers, token, capacity)
        peak_rss = {name: worker_peak_rss_mib(server) for name, server in servers.items()}
        environments = {name: environment_names(server.app.process.pid) for name, server in servers.items()}
    finally:
        for server in servers.values():
            server.stop()
    # fmt: off
    run = {
        "when": f"{started:%Y-%m-%dT%H:%MZ}", "seed": SEED,
        "minutes": round((datetime.now(UTC) - started).total_seconds() / 60, 1),
        "code": code, "machine": machine(),
        "database": {"at the start": durable, "at the end": require_durable("at the end")},
        "method": {
            "full": FULL, "rounds": ROUNDS, "seconds": SECONDS, "connections": CONNECTIONS, "wrk_threads": WRK_THREADS,
            "load_shares": LOAD_SHARES, "common_share": COMMON_SHARE, "latency_requests": open_loop.MIN_REQUESTS,
            "common_requests": COMMON_REQUESTS, "latency_min_seconds": open_loop.MIN_SECONDS,
            "achieved_share": open_loop.ACHIEVED_SHARE,
        },
        "targets": {name: dict(zip(("server", "path", "heading"), target, strict=True)) for name, target in TARGETS.items()},
        "rounds": rounds, "open_loop": points,
        "peak_rss_mib": {name: peak_rss[server] for name, (server, *_) in TARGETS.items()},
        "environment": {name: environments[server] for name, (server, *_) in TARGETS.items()},
    }
    # fmt: on
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
            figures["by_statement"] = dict(database().execute(STATEMENTS).fetchall())
            figures["statements"] = sum(figures["by_statement"].values())
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


def open_loop_plan(capacity: dict, seed: int) -> list[tuple]:
    """Every open-loop point in its order, (target, rate, share, requests): at each of LOAD_SHARES of each
    target's own median throughput, ascending, then at the common rate for all (COMMON_REQUESTS each);
    the targets' order shuffled at each step from `seed`."""
    common = COMMON_SHARE * capacity["service"]
    plan = [
        [(name, share * capacity[name], share, open_loop.MIN_REQUESTS) for name in TARGETS] for share in LOAD_SHARES
    ]
    plan.append([(name, common, None, COMMON_REQUESTS) for name in TARGETS])
    shuffle = random.Random(seed).shuffle
    for step in plan:
        shuffle(step)
    return [point for step in plan for point in step]


def open_loop_points(servers: dict, token: str, capacity: dict) -> list[dict]:
    """k6's open loop (bench/open_loop.py) at each point of open_loop_plan, each after a CHECKPOINT, so
    that none pays for the dirty pages of the one before."""
    plan = open_loop_plan(capacity, SEED)
    total = sum(open_loop.point_seconds(rate, requests) + 3 for _, rate, _, requests in plan)
    print(f"open loop: {len(plan)} points, about {total / 60:.0f} minutes; BENCH_SEED={SEED}", flush=True)
    points = []
    for name, rate, share, requests in plan:
        server, path, _ = TARGETS[name]
        id_base = ID_BLOCK * (1000 + len(points))
        psql("CHECKPOINT")
        seconds = open_loop.point_seconds(rate, requests)
        point = open_loop.k6(servers[server].url + path, token, BENCH_HOST, id_base, rate, seconds)
        point |= {"target": name, "share": share, "common": share is None, "stored": rows_stored(id_base)}
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
        runs.write_section("make bench", "\n".join(summary))
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


def spread(values: list[float], form: str = "{:.0f}") -> str:
    """The median of `values`, and their min–max when they differ."""
    low, high = form.format(min(values)), form.format(max(values))
    return form.format(statistics.median(values)) + (f" ({low}–{high})" if low != high else "")


def point_cell(held: list[dict], name: str, share: float | None) -> str:
    """A target's open-loop point at `share` of its own rate (None: the common rate) over the runs:
    the offered rate, the p50 and the p99 (medians; the p99's min–max across the runs)."""
    points = [next(p for p in run["open_loop"] if p["target"] == name and p["share"] == share) for run in held]
    saturated = sum(p["saturated"] for p in points)
    flag = f" sat.{f' in {saturated} of {len(points)}' if len(points) > 1 else ''}" if saturated else ""
    offered = statistics.median(p["offered"] for p in points)
    p50 = statistics.median(p["p50_ms"] for p in points)
    return f"{offered:.0f}/s: {p50:.0f} / {spread([p['p99_ms'] for p in points])} ms{flag}"


def across(held: list[dict], per_round, *args) -> float:
    """The median across the runs of each run's median over its rounds of `per_round(run, *args)`."""
    return statistics.median(statistics.median(per_round(run, *args)) for run in held)


def target_rows(held: list[dict]) -> list[str]:
    """One row per target, each figure the median across the held runs: throughput (each run's median
    over its rounds; min–max across the runs), open-loop latency, CPU per create, statements and round
    trips per create (bench/runs.py: round_trips)."""
    lines = [
        f"| target | requests/s (min–max across the {len(held)} runs) | open loop p50 / p99 (min–max): at 50% "
        "of its own | at 80% of its own | at the common rate | CPU µs per create: app and nginx + PostgreSQL = all "
        "| SQL statements / round trips per create |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name in TARGETS:
        rates = [statistics.median(runs.per_round(run, name, "rps")) for run in held]
        server, everything = (across(held, runs.cpu_per_create, name, database) for database in (False, True))
        statements, trips = (across(held, runs.per_create, name, key) for key in ("statements", "round_trips"))
        lines.append(
            f"| {TARGETS[name][2]} | {spread(rates)} | "
            + " | ".join(point_cell(held, name, share) for share in (*TABLE_SHARES, None))
            + f" | {server:,.0f} + {everything - server:,.0f} = {everything:,.0f} | {statements:.2f} / {trips:.2f} |"
        )
    return lines


def report(run: dict) -> list[str]:
    """The full report of one run (benchmarks/make-bench.md): every target, every figure, every estimator."""
    lines = [f"# make bench, {run['when']} UTC, {run['minutes']} minutes", "", *method_lines(run), ""]
    lines += [*target_rows([run]), ""]
    lines += [
        "| target | closed-loop p50 / p99 (wrk, median of rounds) | non-2xx / socket errors | 2xx answers / rows "
        "stored | requests answered / counted / logged (equal work) | peak app worker memory (VmHWM) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in TARGETS:
        rounds = run["rounds"][name]
        total = {key: sum(f.get(key) or 0 for f in rounds) for key in ("requests", "counted", "logged", "stored")}
        total |= {key: sum(f[key] for f in rounds) for key in ("non_2xx", "socket_errors")}
        work = " / ".join(str(total[k]) for k in ("requests", "counted", "logged")) if name in EQUAL_WORK else ""
        lines.append(
            f"| {name} | {statistics.median(f['p50_us'] for f in rounds) / 1000:.1f} / "
            f"{statistics.median(f['p99_us'] for f in rounds) / 1000:.1f} ms | {total['non_2xx']} / "
            f"{total['socket_errors']} | {total['requests'] - total['non_2xx']} / {total['stored']} | {work} | "
            f"{run['peak_rss_mib'][name]:.0f} MiB |"
        )
    lines += ["", "Each target's app server ran with these variables alone (names; bench/servers.py: CLEAN_ENV):", ""]
    lines += [f"- {name}: {', '.join(f'`{n}`' for n in names)}" for name, names in run["environment"].items()]
    lines += ["", "Each target's statements per create (pg_stat_statements' calls over the rounds):", ""]
    for name in TARGETS:
        calls = runs.statements_per_create(run, name)
        lines.append(f"- {name}: " + "; ".join(f"{n:.2f} × `{q[:90]}`" for q, n in calls.items() if n >= 0.01))
    lines += ["", "Every estimator, this run:", "", *runs.runs_table([run]), "", "Every open-loop point:", ""]
    lines += [
        "| target | share of its own | offered /s | answered in the window /s | sent | failed | dropped | p50 | p90 "
        "| p99 | p99.9 | max | saturated |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for p in run["open_loop"]:
        share = "common" if p["common"] else f"{p['share']:.0%}"
        lines.append(
            f"| {p['target']} | {share} | {p['offered']} | "
            f"{p['achieved']:.1f} | {p['sent']} | {p['failed']} | {p['dropped']} | {p['p50_ms']:.1f} | "
            f"{p['p90_ms']:.1f} | {p['p99_ms']:.1f} | {p['p999_ms']:.1f} | {p['max_ms']:.0f} | "
            f"{'yes' if p['saturated'] else ''} |"
        )
    return lines


def method_lines(run: dict) -> list[str]:
    """The run's machine, code, database settings and method (BENCHMARKS.md says what each means)."""
    code, settings = run["code"], run["database"]["at the start"]
    return [
        f"- Machine: {run['machine']}; commit {code['commit'][:10]}"
        + (f" with uncommitted changes ({code['uncommitted']})" if code["uncommitted"] else ""),
        "- PostgreSQL read back at the start and the end: " + ", ".join(f"`{k}={v}`" for k, v in settings.items()),
        "- Method: " + ", ".join(f"{k} {v}" for k, v in run["method"].items()) + f"; BENCH_SEED={run['seed']}",
    ]


def section(run: dict, held: list[dict], raw: Path, plot: Path) -> list[str]:
    """BENCHMARKS.md's section: the held runs against the floors, the plot, the targets' medians over the runs."""
    where = raw.parent.relative_to(ROOT) if raw.is_relative_to(ROOT) else raw.parent
    code = run["code"]["commit"][:10] + (" with uncommitted changes" if run["code"]["uncommitted"] else "")
    settings = ", ".join(f"`{name}={value}`" for name, value in run["database"]["at the start"].items())
    return [
        f"{len(held)} run{'s' if len(held) > 1 else ''} of this code ({code}; the newest {runs.RUNS_HELD} are "
        "held): each cell the run's ratio of medians over its rounds, and the range of its per-round ratios; "
        "floors and aims are judged on the median of the runs.",
        "",
        *runs.runs_table(held),
        "",
        f"![Throughput, and open-loop latency against offered load, per target]({where}/{plot.name})",
        "",
        f"The latest run, {run['when'][:10]} {run['when'][11:16]} UTC (BENCH_SEED={run['seed']}), {run['machine']}; "
        f"the server's settings read back at the start and the end: {settings}. Every figure, estimator and "
        f"open-loop point of it: [{where}/make-bench.md]({where}/make-bench.md); the raw figures of each round and "
        f"point: [{where}/{raw.name}]({where}/{raw.name}). Each target over the {len(held)} runs, each figure the "
        "median of the runs':",
        "",
        *target_rows(held),
    ]


if __name__ == "__main__":
    main()
