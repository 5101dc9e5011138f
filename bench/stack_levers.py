"""`make bench-stack`: the app server behind nginx, chosen with the database 0.1, 1 and 5 ms away.

Every variant is nginx in front of an app server on a unix socket (the production path), serving the
service (bench.wsgi, production settings); each reaches PostgreSQL through bench/delay_proxy.py,
which adds a fixed delay each way. For each round-trip delay the variants are loaded side by side in
rotating rounds (bench.run.run_rounds), and a table is printed: requests/s ÷ the baseline (Granian
as `make serve` runs it), CPU per request (app server and nginx), p99, errors, beside the
baseline run again (the noise). The proxy's own CPU is measured apart and printed per request.
"""

import os
import statistics
import subprocess
import sys
import time

import psycopg

from bench.run import ENV, LOG_DIR, cpu_seconds, prepare, psql, ratio, run_rounds, summarize
from bench.stack import stack_unit
from deploy.processes import ROOT, free_port

ROUNDS = int(os.environ.get("BENCH_ROUNDS", 3))
SECONDS = int(os.environ.get("BENCH_SECONDS", 5))
# Added round trip, ms; the proxy holds each chunk half of it in each direction.
RTTS_MS = [float(ms) for ms in os.environ.get("BENCH_RTTS_MS", "0.1,1,5").split(",")]
ONLY = [name for name in os.environ.get("BENCH_VARIANTS", "").split(",") if name]
# name: (row label, app server, processes, threads, nginx upstream keep-alive).
VARIANTS = {
    "baseline": (
        "baseline: Granian 1 process per core × 4 threads, nginx upstream keep-alive (`make serve`)",
        "granian",
        2,
        4,
        True,
    ),
    "baseline-again": ("the baseline again, an identical second server (the noise)", "granian", 2, 4, True),
    "granian-2x8": ("Granian 2 processes × 8 threads", "granian", 2, 8, True),
    "granian-kr1000": (
        "Granian 2 × 4, nginx's upstream connections renewed every 1000 requests, not 4",
        "granian-kr1000",
        2,
        4,
        True,
    ),
    "uwsgi": ("uWSGI 2 processes × 4 threads, `uwsgi_pass` (`make serve`'s until issue 26)", "uwsgi", 2, 4, False),
    "uwsgi-2x8": ("uWSGI 2 processes × 8 threads", "uwsgi", 2, 8, False),
    "uwsgi-4x2": ("uWSGI 4 processes × 2 threads", "uwsgi", 4, 2, False),
    "gthread": ("gunicorn gthread 2 × 4", "gunicorn-gthread", 2, 4, False),
    "gthread-ka": ("gunicorn gthread 2 × 4, nginx upstream keep-alive", "gunicorn-gthread", 2, 4, True),
    "sync-2": ("gunicorn sync, 2 processes", "gunicorn-sync", 2, 1, False),
    "sync-3": ("gunicorn sync, 3 processes", "gunicorn-sync", 3, 1, False),
}


def start_proxy(pg_port: int) -> tuple[subprocess.Popen, int]:
    port = free_port()
    command = [sys.executable, "-m", "bench.delay_proxy", "--listen", f"127.0.0.1:{port}"]
    command += ["--target", f"127.0.0.1:{pg_port}", "--max-seconds", "7200"]
    proxy = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.PIPE, stdout=(LOG_DIR / "delay_proxy.log").open("ab"))
    time.sleep(0.5)
    return proxy, port


def set_delay(proxy: subprocess.Popen, rtt_ms: float) -> None:
    proxy.stdin.write(f"{rtt_ms / 2}\n".encode())
    proxy.stdin.flush()
    time.sleep(0.2)


def measured_rtt_us(url: str, samples: int = 200) -> float:
    """Median time of `SELECT 1` on `url`: the round trip an app sees, client library included."""
    with psycopg.connect(url, autocommit=True) as connection:
        for _ in range(10):
            connection.execute("SELECT 1")
        times = []
        for _ in range(samples):
            started = time.perf_counter()
            connection.execute("SELECT 1").fetchone()
            times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def main() -> None:
    token = prepare("bench-stack")
    direct_url = os.environ["DATABASE_URL"]
    pg_port = int(direct_url.rsplit(":", 1)[1].split("/")[0])
    proxy, proxy_port = start_proxy(pg_port)
    proxied_url = direct_url.replace(f":{pg_port}/", f":{proxy_port}/")
    env = {**ENV, "DATABASE_URL": proxied_url}
    variants = {name: VARIANTS[name] for name in (ONLY or VARIANTS)}
    servers, tables = {}, []
    try:
        for name in variants:
            servers[name] = stack_unit(name, *variants[name][1:], LOG_DIR, **env).start()
        direct_rtt = measured_rtt_us(direct_url)
        for rtt_ms in RTTS_MS:
            set_delay(proxy, rtt_ms)
            # run_rounds numbers its plants from the same ids each time: each delay starts on an empty table.
            psql("TRUNCATE plants_plant")
            rtt = measured_rtt_us(proxied_url, 50 if rtt_ms >= 2 else 200)
            proxy_cpu, stored = cpu_seconds([proxy.pid]), int(psql("SELECT count(*) FROM plants_plant"))
            targets = {name: (name, "/plants", name) for name in variants}
            rounds = run_rounds(servers, token, targets, ROUNDS, SECONDS)
            proxy_cpu = cpu_seconds([proxy.pid]) - proxy_cpu
            # Every request of the phase, warm-ups included, stored one plant.
            requests = int(psql("SELECT count(*) FROM plants_plant")) - stored
            tables.append(table(rounds, variants, rtt_ms, rtt, direct_rtt, proxy_cpu / requests * 1e6))
            print(tables[-1], flush=True)
    finally:
        for server in servers.values():
            server.stop()
        proxy.stdin.close()
        proxy.wait(timeout=10)
    print("\n\n".join(tables))


def table(rounds: dict, variants: dict, rtt_ms: float, rtt_us: float, direct_us: float, proxy_us: float) -> str:
    base = summarize(rounds["baseline"])
    lines = [
        f"Database round trip +{rtt_ms:g} ms: `SELECT 1` takes {rtt_us / 1000:.2f} ms through the proxy "
        f"({direct_us / 1000:.2f} ms direct); {ROUNDS} rounds of {SECONDS} s; the proxy's own CPU "
        f"{proxy_us:.0f} µs per request (not counted below)",
        "",
        "| app server behind nginx | requests/s ÷ baseline | requests/s | CPU per request (app + nginx) "
        "| p99 | statements per create | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, (label, *_) in variants.items():
        figures = summarize(rounds[name])
        cpu = f"{figures['cpu_us']:.0f} µs ({figures['cpu_us'] / base['cpu_us'] - 1:+.0%})"
        errors = figures["non_2xx"] + figures["socket_errors"]
        lines.append(
            f"| {label} | {ratio(rounds, name, 'baseline'):.2f} | {figures['rps']:.0f} | {cpu} "
            f"| {figures['p99_ms']:.1f} ms | {figures['statements']:.2f} | {errors} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
