"""`make bench-cluster`: creates/s through make cluster's HAProxy with one and with two production units,
on one PostgreSQL behind PgBouncer and on the failover pair (localcluster/database.py), counted in Redis.
Run under scripts/with-postgres with PG_DURABLE=1: every server's fsync, full_page_writes and
synchronous_commit are read back, and the run refused unless all are on. wrk runs on the same machine;
prints a Markdown table.
"""

import os
import secrets
import statistics
import tempfile
from pathlib import Path

import dj_database_url

from bench.run import BENCH_HOST, manage, require_durable, wrk
from localcluster.cluster import Cluster
from localcluster.database import FailoverDatabase

ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
SECONDS = int(os.environ.get("BENCH_SECONDS", 10))
CONNECTIONS = int(os.environ.get("BENCH_CONNECTIONS", 32))
ENV = {
    "DJANGO_DEBUG": "0",
    "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
    "DJANGO_ALLOWED_HOSTS": BENCH_HOST,  # the load names it (bench/create.lua)
    "PLANTS_THROTTLE_RATE": "100000000/second",  # on, so its Redis round trip is measured
}


def measure(app_servers: int, round_base: int, database: FailoverDatabase | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="plantstore-bench-cluster.") as work_dir:
        if database:
            cluster = Cluster(None, Path(work_dir), app_servers=app_servers, database_url=database.url, **ENV)
        else:
            settings_dict = dj_database_url.parse(os.environ["DATABASE_URL"])
            cluster = Cluster(settings_dict, Path(work_dir), app_servers=app_servers, **ENV)
        cluster.start()
        try:
            env = {**os.environ, **ENV, "DATABASE_URL": cluster.env["DATABASE_URL"]}
            token = manage("token", "issue", f"bench-{app_servers}", env=env).strip()
            url = f"{cluster.url}/plants"
            wrk(url, token, round_base, 3, CONNECTIONS)  # warm-up: connections, prepared caches, throttle keys
            rounds = [wrk(url, token, round_base + (n + 1) * 10**10, SECONDS, CONNECTIONS) for n in range(ROUNDS)]
        finally:
            cluster.stop()
    return {
        "creates/s": statistics.median(r["rps"] for r in rounds),
        "p50 ms": statistics.median(r["p50_us"] for r in rounds) / 1000,
        "p99 ms": statistics.median(r["p99_us"] for r in rounds) / 1000,
        "errors": sum(r["non_2xx"] + r["socket_errors"] for r in rounds),
    }


def main() -> None:
    durable = require_durable("(the one PostgreSQL)", os.environ["DATABASE_URL"])
    manage("migrate", "--no-input", env={**os.environ, **ENV})
    tier = "one PostgreSQL, PgBouncer"
    results = {(tier, servers): measure(servers, servers * 10**12) for servers in (1, 2)}
    database = FailoverDatabase().start()
    try:
        for node in database.nodes:
            require_durable(f"on the failover pair's {node.name}", node.url)
        manage("migrate", "--no-input", env={**os.environ, **ENV, "DATABASE_URL": database.url})
        tier = "primary and synchronous standby"
        results |= {(tier, servers): measure(servers, servers * 10**12, database) for servers in (1, 2)}
    finally:
        database.stop()
    settings = ", ".join(f"{name}={value}" for name, value in durable.items())
    lines = [
        f"wrk -t2 -c{CONNECTIONS} -d{SECONDS}s, median of {ROUNDS} rounds; {os.cpu_count()} cores; every PostgreSQL {settings}",
        "| database | app servers | creates/s | p50 | p99 | non-2xx or socket errors |\n|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {tier} | {servers} | {r['creates/s']:.0f} | {r['p50 ms']:.1f} ms | {r['p99 ms']:.1f} ms | {r['errors']} |"
        for (tier, servers), r in results.items()
    ]
    print("\n".join(lines))


if __name__ == "__main__":
    main()
