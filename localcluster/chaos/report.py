"""What a chaos run shows: a summary per kind of fault, and a plot (SVG, drawn here) of answers per
second by status and of latency over time, each fault's span shaded."""

import html
import math
from collections import defaultdict

from localcluster.chaos.checker import ANSWER_WITHIN_S

STATUSES = {"200": "#2a9d4a", "429": "#e9a23b", "503": "#d62828", "no answer": "#6a4c93", "other": "#000000"}
LAYERS = {"database": "#d62828", "database link": "#457b9d", "app servers": "#2a9d8f", "redis": "#e9a23b"}


def status_of(request: dict) -> str:
    status = request["status"]
    return "no answer" if status is None else str(status) if str(status) in STATUSES else "other"


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)] if ordered else 0.0


def summary(records: list[dict]) -> dict[str, dict]:
    """Per kind of fault: how many, how many of them could not start (the formation's state refused
    one), the worst unavailability window (the longest stretch without a 200 that overlaps one), the
    requests refused or unanswered while one lasted, and their p99 latency."""
    requests = [record for record in records if record["type"] == "request"]
    successes = sorted(request["answered"] for request in requests if request["status"] == 200)
    gaps = list(zip(successes, successes[1:], strict=False))
    kinds: dict[str, dict] = defaultdict(
        lambda: {"faults": 0, "not_started": 0, "worst_unavailable_s": 0.0, "refused": 0, "latencies": []}
    )
    for fault in (record for record in records if record["type"] == "fault"):
        start, end = fault["started"], fault["healed"]
        kind = kinds[fault["kind"]]
        kind["faults"] += 1
        kind["not_started"] += 1 if fault["note"] else 0
        worst = max((later - earlier for earlier, later in gaps if earlier < end and later > start), default=0.0)
        kind["worst_unavailable_s"] = round(max(kind["worst_unavailable_s"], worst), 2)
        during = [request for request in requests if start <= request["sent"] <= end]
        kind["refused"] += sum(1 for request in during if request["status"] not in (200, 429))
        kind["latencies"] += [request["answered"] - request["sent"] for request in during]
    return {
        name: {**{key: value for key, value in kind.items() if key != "latencies"},
               "requests": len(kind["latencies"]), "p99_s": round(percentile(kind["latencies"], 0.99), 3)}
        for name, kind in sorted(kinds.items())
    }  # fmt: skip


def summary_text(table: dict[str, dict]) -> str:
    header = f"{'fault':34} {'count':>5} {'not started':>11} {'worst unavailable':>18} {'refused':>8}"
    lines = [f"{header} {'requests':>9} {'p99':>8}"]
    for name, row in table.items():
        lines.append(
            f"{name:34} {row['faults']:>5} {row['not_started']:>11} {row['worst_unavailable_s']:>16.1f} s {row['refused']:>8}"
            f" {row['requests']:>9} {row['p99_s']:>6.3f} s"
        )
    return "\n".join(lines)


def plot(records: list[dict], started_at: float, title: str) -> str:
    """An SVG: answers per second by status (top) and latency per second, median and slowest (bottom),
    over seconds since the load began; each fault's span shaded in its layer's colour and named."""
    requests = [record for record in records if record["type"] == "request"]
    faults = [record for record in records if record["type"] == "fault"]
    seconds = max([int(request["answered"] - started_at) + 1 for request in requests] or [1])
    per_second = defaultdict(lambda: [0] * seconds)
    took = defaultdict(list)
    for request in requests:
        second = min(seconds - 1, max(0, int(request["answered"] - started_at)))
        per_second[status_of(request)][second] += 1
        took[int(max(0.0, request["sent"] - started_at))].append(request["answered"] - request["sent"])
    width, left, panel, top = 1100, 60, 220, 40
    x = lambda second: left + (width - left - 20) * second / seconds  # noqa: E731
    highest = max([max(counts) for counts in per_second.values()] or [1]) or 1
    parts = [f'<text x="{left}" y="20" font-size="14">{html.escape(title)}</text>']
    for number, fault in enumerate(faults):
        start, end = x(fault["started"] - started_at), x(fault["healed"] - started_at)
        colour = LAYERS.get(fault["layer"], "#888888")
        parts.append(
            f'<rect x="{start:.1f}" y="{top}" width="{max(end - start, 1.5):.1f}" height="{2 * panel + 30}" fill="{colour}" fill-opacity="0.12"/>'
        )
        parts.append(
            f'<text x="{start + 2:.1f}" y="{top + 12 + 11 * (number % 4)}" font-size="10" fill="{colour}">{html.escape(fault["kind"])}</text>'
        )
    for status, colour in STATUSES.items():
        if status in per_second:
            points = " ".join(
                f"{x(s):.1f},{top + panel - panel * n / highest:.1f}" for s, n in enumerate(per_second[status])
            )
            parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1.2"/>')
    low = top + 2 * panel + 30
    scale = lambda value: low - panel * min(value, ANSWER_WITHIN_S + 2) / (ANSWER_WITHIN_S + 2)  # noqa: E731
    for fraction, colour in ((0.5, "#1d3557"), (1.0, "#d62828")):
        points = " ".join(f"{x(s):.1f},{scale(percentile(took[s], fraction)):.1f}" for s in sorted(took))
        parts.append(f'<polyline points="{points}" fill="none" stroke="{colour}" stroke-width="1"/>')
    parts.append(
        f'<line x1="{left}" x2="{width - 20}" y1="{scale(ANSWER_WITHIN_S):.1f}" y2="{scale(ANSWER_WITHIN_S):.1f}" stroke="#999" stroke-dasharray="4"/>'
    )
    parts += axes(left, width, top, panel, low, highest, seconds, x)
    body = "\n".join(parts)
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{low + 40}" font-family="sans-serif">\n{body}\n</svg>\n'


def axes(left, width, top, panel, low, highest, seconds, x) -> list[str]:
    legend = " ".join(f'<tspan fill="{colour}">■ {status}</tspan>' for status, colour in STATUSES.items())
    parts = [
        f'<line x1="{left}" x2="{left}" y1="{top}" y2="{top + panel}" stroke="#000"/>',
        f'<line x1="{left}" x2="{width - 20}" y1="{top + panel}" y2="{top + panel}" stroke="#000"/>',
        f'<text x="4" y="{top + 10}" font-size="10">{highest}/s</text>',
        f'<text x="{left + 200}" y="{top + panel + 14}" font-size="11">answers per second by status: {legend}</text>',
        f'<line x1="{left}" x2="{left}" y1="{low - panel}" y2="{low}" stroke="#000"/>',
        f'<line x1="{left}" x2="{width - 20}" y1="{low}" y2="{low}" stroke="#000"/>',
        f'<text x="4" y="{low - panel + 10}" font-size="10">{ANSWER_WITHIN_S + 2:g} s</text>',
        f'<text x="{left + 200}" y="{low + 14}" font-size="11">latency by second sent: <tspan fill="#1d3557">median</tspan>,'
        f' <tspan fill="#d62828">slowest</tspan>; dashed: the {ANSWER_WITHIN_S:g} s bound</text>',
    ]
    step = max(10, 10 * math.ceil(seconds / 120))
    for second in range(0, seconds + 1, step):
        parts.append(f'<text x="{x(second):.1f}" y="{low + 28}" font-size="10">{second} s</text>')
    return parts
