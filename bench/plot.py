"""make bench's plot of one run (its raw JSON, bench/runs.py): each target's throughput over the rounds, and
its answered rate, p50 and p99 against the rate offered, open loop. Run in the load venv (matplotlib):
`python -m bench.plot RUN.json PLOT.png`.
"""

import json
import statistics
import sys

import matplotlib

matplotlib.use("Agg")  # files only, no display

import matplotlib.pyplot as plt  # noqa: E402

MARKERS = "osD^v<>phX*"


def plot(run: dict, path: str) -> None:
    targets = list(run["targets"])
    colours = plt.get_cmap("tab10")
    figure, axes = plt.subplots(2, 2, figsize=(14, 10), constrained_layout=True)
    bars, achieved, p50, p99 = axes.flat

    # Closed loop (wrk): each target's median requests/s over the rounds, whiskers from the slowest
    # round to the fastest.
    rates = [sorted(r["rps"] for r in run["rounds"][name]) for name in targets]
    medians = [statistics.median(values) for values in rates]
    errors = [
        [m - v[0] for m, v in zip(medians, rates, strict=True)],
        [v[-1] - m for m, v in zip(medians, rates, strict=True)],
    ]
    bars.bar(range(len(targets)), medians, yerr=errors, capsize=4, color=[colours(i) for i in range(len(targets))])
    bars.set_xticks(range(len(targets)), targets, rotation=30, ha="right")
    bars.set_ylabel("requests/s")
    bars.set_title(f"Throughput, closed loop (wrk, {run['method']['connections']} connections): "
                   f"median of {run['method']['rounds']} rounds, min–max")  # fmt: skip

    for index, name in enumerate(targets):
        points = sorted((p for p in run["open_loop"] if p["target"] == name), key=lambda p: p["offered"])
        offered = [p["offered"] for p in points]
        style = {"color": colours(index), "marker": MARKERS[index % len(MARKERS)], "label": name}
        for axis, key in ((achieved, "achieved"), (p50, "p50_ms"), (p99, "p99_ms")):
            axis.plot(offered, [p[key] for p in points], **style)
            saturated = [p for p in points if p["saturated"]]
            axis.scatter([p["offered"] for p in saturated], [p[key] for p in saturated], s=160, facecolors="none",
                         edgecolors="red", linewidths=1.5, zorder=3)  # fmt: skip
    top = max(p["offered"] for p in run["open_loop"]) * 1.05
    achieved.plot([0, top], [0, top], color="grey", linestyle=":", label="answered = offered")
    achieved.set_title("Rate answered against rate offered (open loop, k6); red rings: saturated")
    achieved.set_ylabel("answered requests/s")
    for axis, title in ((p50, "p50"), (p99, "p99")):
        axis.set_yscale("log")
        axis.set_ylabel("ms, from each request's scheduled start")
        axis.set_title(f"Latency {title} against rate offered (open loop); red rings: saturated")
    common = next(p["offered"] for p in run["open_loop"] if p["common"])
    for axis in (achieved, p50, p99):
        axis.axvline(common, color="grey", linewidth=0.8)
        axis.set_xlabel(f"offered requests/s (grey line: the common rate, {common}/s)")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(f"make bench, {run['when']} UTC, {run['machine']}", fontsize=10)
    figure.savefig(path, dpi=80)


if __name__ == "__main__":
    with open(sys.argv[1]) as file:
        plot(json.load(file), sys.argv[2])
