"""Latency at a fixed offered load, open loop: k6's constant-arrival-rate executor (bench/create.js).

The arrival rate holds whatever the answers do: each request starts at its scheduled time on a free virtual user,
or is dropped and counted when none is free. A point is saturated when the rate answered within the offered
window falls short of the offered one, or any request was dropped: its latency then says how the queue grew.
"""

import json
import math
import os
import subprocess
import tempfile
from pathlib import Path

from bench.servers import CLEAN_ENV
from deploy.processes import ROOT

K6 = os.path.abspath(os.environ.get("BENCH_K6", ROOT / ".venv" / "load" / "bin" / "k6"))  # make bench: its venv's
# Each point sends at least this many requests (its duration grows at low rates), so that its p99 rests
# on 30 answers or more; and lasts at least MIN_SECONDS.
MIN_REQUESTS = int(os.environ.get("BENCH_LATENCY_REQUESTS", 3000))
MIN_SECONDS = int(os.environ.get("BENCH_LATENCY_MIN_SECONDS", 10))
# Saturated below this share of the offered rate answered in the window. The requests still in flight
# when the window ends are missing from it, a share equal to the mean latency over the window's length
# (under 1% below saturation here); a shortfall beyond 2% means the answers lag the arrivals.
ACHIEVED_SHARE = 0.98
# Virtual users, all allocated before the start (allocating one mid-run takes long enough to drop
# requests meanwhile): one second's worth of arrivals. A request is dropped only when every one of
# them waits on an answer, that is (Little's law) when requests wait a second on average.
IN_FLIGHT_S = 1.0
PERCENTILES = {
    "p50_ms": "med",
    "p90_ms": "p(90)",
    "p99_ms": "p(99)",
    "p999_ms": "p(99.9)",
    "max_ms": "max",
}  # k6's names


def point_seconds(rate: float, requests: int = MIN_REQUESTS) -> int:
    """How long a point at `rate` runs: `requests` requests, MIN_SECONDS at least."""
    return max(MIN_SECONDS, math.ceil(requests / rate))


def k6(url: str, token: str, host: str, id_base: int, rate: float, seconds: int | None = None) -> dict:
    """k6 offering `rate` creates a second to `url` for `seconds` (point_seconds's by default): the
    offered and achieved rates, the requests sent, answered in the window, failed and dropped, the
    latency's percentiles (ms, from each request's scheduled start), and whether it saturated."""
    seconds = seconds or point_seconds(rate)
    with tempfile.TemporaryDirectory(prefix="plantstore-k6.") as work_dir:
        summary = Path(work_dir) / "summary.json"
        options = {
            "BENCH_URL": url,
            "BENCH_TOKEN": token,
            "BENCH_HOST": host,
            "BENCH_ID_BASE": str(id_base),
            "BENCH_RATE": str(round(rate)),
            "BENCH_SECONDS": str(seconds),
            "BENCH_VUS": str(max(50, math.ceil(rate * IN_FLIGHT_S))),
            "BENCH_SUMMARY": str(summary),
        }
        command = [K6, "run", "--quiet", "--no-usage-report", "--no-color"]
        command += [part for name, value in options.items() for part in ("-e", f"{name}={value}")]
        done = subprocess.run(
            [*command, str(ROOT / "bench" / "create.js")],
            env={**CLEAN_ENV, "HOME": work_dir},  # no K6_* option of the caller's shell; nothing kept outside it
            cwd=work_dir,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0 or not summary.exists():
            raise SystemExit(f"bench: k6 exited {done.returncode} at {rate:.0f}/s on {url}: {done.stderr[-2000:]}")
        return figures(json.loads(summary.read_text()), round(rate), seconds)


def figures(summary: dict, rate: int, seconds: int) -> dict:
    """A point's figures from k6's end-of-test summary (handleSummary's data)."""
    metrics = summary["metrics"]

    def count(name: str) -> int:
        return int(metrics.get(name, {}).get("values", {}).get("count", 0))

    latency = metrics["iteration_duration"]["values"]
    sent, dropped, in_window = count("http_reqs"), count("dropped_iterations"), count("answered_in_window")
    # http_req_failed is a rate: its "passes" are the requests that failed (no 2xx or 3xx, or no answer).
    failed = int(metrics["http_req_failed"]["values"]["passes"])
    achieved = in_window / seconds
    return {
        "offered": rate,
        "seconds": seconds,
        "achieved": achieved,
        "sent": sent,
        "answered_in_window": in_window,
        "failed": failed,
        "dropped": dropped,
        "saturated": dropped > 0 or achieved < ACHIEVED_SHARE * rate,
    } | {key: latency[name] for key, name in PERCENTILES.items()}
