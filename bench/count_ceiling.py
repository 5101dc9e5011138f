"""`make bench`'s ceiling of one client: its count, a statement on one row, beside the INSERT of a create.

Each create of a token counts on that token's one row (plants/rate_stores.py), so the rate at which PostgreSQL
can run the count on one row caps a single client, however many servers serve it. This runs with pgbench (16
clients, as `make bench`'s load) on the server scripts/with-postgres started (PG_DURABLE=1): the service's count
(plants.rate_stores.upsert_sql) on one row of its UNLOGGED table and of a logged copy (what it was before), the
service's INSERT of a new plant; and Redis' INCR on one key (redis-server as `make cluster` runs it). Prints the
figures and writes its section of BENCHMARKS.md.
"""

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import django
import psycopg
from django.core.management import call_command

from bench.run import ENV
from bench.runs import write_section
from localcluster.cluster import Redis

CLIENTS = 16
SECONDS = int(os.environ.get("BENCH_SECONDS", 8))
KEY = "bench-count-ceiling"
LOGGED_COPY = "bench_count_ceiling_logged"


def count_statement(table: str) -> str:
    """The service's count on one row of `table`, its parameters filled in as one window's."""
    from plants.rate_stores import upsert_sql  # once Django is set up (main)

    sql = upsert_sql("postgresql").replace('"plants_ratelimitcounter"', table)
    for value in (f"'{KEY}'", "0", "3600", "3600"):
        sql = sql.replace("%s", value, 1)
    return sql + ";\n"


# As Django sends a create's INSERT (plants.services), a new id each time.
INSERT = (
    "\\set id random(1, 9000000000000000000)\n"
    'INSERT INTO "plants_plant" ("id", "name", "tag", "created_at") VALUES (:id, \'Fern\', NULL, now());\n'
)


def pgbench(script: str, work_dir: Path) -> dict:
    path = work_dir / "script.sql"
    path.write_text(script)
    binary = Path(os.environ["PLANTSTORE_PG_BIN"]) / "pgbench"
    output = subprocess.run(
        [str(binary), "-n", f"-c{CLIENTS}", "-j2", f"-T{SECONDS}", "-M", "prepared", "-f", str(path),
         os.environ["DATABASE_URL"]],
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    return {
        "per_s": float(re.search(r"tps = ([\d.]+)", output).group(1)),
        "latency_ms": float(re.search(r"latency average = ([\d.]+) ms", output).group(1)),
    }


def redis_incr() -> dict:
    """INCR on one key from 16 clients, against a redis-server as make cluster runs it (in memory only)."""
    server = Redis().start()
    try:
        started = time.monotonic()
        output = subprocess.run(
            ["redis-benchmark", "-p", str(server.port), "-c", str(CLIENTS), "-n", "400000", "--csv", "INCR", KEY],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        seconds = time.monotonic() - started
        fields = output.strip().splitlines()[-1].replace('"', "").split(",")
        return {"per_s": float(fields[1]), "latency_ms": float(fields[2]), "seconds": seconds}
    finally:
        server.stop()


def main() -> None:
    if "DATABASE_URL" not in os.environ:
        raise SystemExit("bench.count_ceiling: run under scripts/with-postgres (make bench)")
    os.environ.update(ENV)  # make bench's settings
    django.setup()
    call_command("migrate", "--no-input", verbosity=0)
    with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as connection:
        settings = {name: connection.execute(f"SHOW {name}").fetchone()[0] for name in ("fsync", "synchronous_commit")}
        unlogged = connection.execute(
            "SELECT relpersistence = 'u' FROM pg_class WHERE relname = 'plants_ratelimitcounter'"
        ).fetchone()[0]
        connection.execute(f"DROP TABLE IF EXISTS {LOGGED_COPY}")
        connection.execute(f"CREATE TABLE {LOGGED_COPY} (LIKE plants_ratelimitcounter INCLUDING ALL)")
        work_dir = Path(tempfile.mkdtemp(prefix="plantstore-bench-count."))
        try:
            figures = {
                "count": pgbench(count_statement('"plants_ratelimitcounter"'), work_dir),
                "logged": pgbench(count_statement(LOGGED_COPY), work_dir),
                "insert": pgbench(INSERT, work_dir),
            }
        finally:
            shutil.rmtree(work_dir, ignore_errors=True)
            connection.execute(f"DROP TABLE {LOGGED_COPY}")
    figures["redis"] = redis_incr()
    report(figures, settings, unlogged)


def report(figures: dict, settings: dict, unlogged: bool) -> None:
    insert = figures["insert"]["per_s"]
    rows = [
        ("the service's count on one row (UNLOGGED table)" if unlogged else "the service's count on one row (logged!)",
         figures["count"]),
        ("the same count on one row of a logged table (before)", figures["logged"]),
        ("the service's INSERT of a new plant", figures["insert"]),
        ("Redis: INCR on one key (the service's count is EXISTS, then INCR)", figures["redis"]),
    ]  # fmt: skip
    lines = [
        f"`python -m bench.count_ceiling` (run by `make bench`), {time.strftime('%Y-%m-%d')}: pgbench and "
        f"redis-benchmark, {CLIENTS} clients, {SECONDS} s each, PostgreSQL with `fsync={settings['fsync']}` and "
        f"`synchronous_commit={settings['synchronous_commit']}`, on this machine's disk.",
        "",
        "| statement, 16 clients | per second | latency, mean | ÷ the INSERT |",
        "|---|---:|---:|---:|",
    ]
    for label, figure in rows:
        lines.append(
            f"| {label} | {figure['per_s']:,.0f} | {figure['latency_ms']:.2f} ms | {figure['per_s'] / insert:.2f} |"
        )
    holds = figures["count"]["per_s"] >= insert and figures["redis"]["per_s"] / 2 >= insert
    lines += [
        "",
        f"One client's count sustains the INSERT's rate: **{'yes' if holds else 'NO'}** (Redis at half its INCR rate).",
    ]
    text = "\n".join(lines)
    print(text)
    if SECONDS >= 8:  # a smoke run (make bench's BENCH_SECONDS shortened) publishes nothing
        write_section("bench/count_ceiling.py", text)


if __name__ == "__main__":
    main()
