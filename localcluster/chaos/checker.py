"""The chaos run's checker: the service's contract over a whole history, once every fault is healed.

Pure functions of the history (localcluster/chaos/history.py) and the rows stored at the end
({id: {"id", "name", "tag"?}}). Each rule found broken is a Violation, told with the requests and
faults around it (explain()).
"""

import math
from collections import defaultdict
from dataclasses import dataclass

# Every request is answered within this (the README's client timeout; the database bound is 5 s).
ANSWER_WITHIN_S = 10.0
# Once the last fault is healed: a primary, its synchronous standby, every unit ready, within this.
CONVERGE_WITHIN_S = 60.0
# What a valid create with a valid token may be refused with besides 503: a 429 past its limit.
REFUSALS = {429: 42900, 503: 50300}
# After Redis is back, a request begun before may still have found it stopped.
REDIS_MARGIN_S = ANSWER_WITHIN_S


@dataclass(frozen=True)
class Violation:
    rule: str
    at: float  # time.time() of what broke it
    detail: str


def check(records: list[dict], rows: dict[int, dict], limit: int, window: int) -> list[Violation]:
    """Every rule over the history; `limit` requests per `window` seconds is each token's rate limit."""
    requests = [record for record in records if record["type"] == "request"]
    faults = [record for record in records if record["type"] == "fault"]
    converged = [record for record in records if record["type"] == "converged"]
    return [
        *answers_are_contracts(requests),
        *answered_in_time(requests),
        *stored_as_acknowledged(requests, rows),
        *stored_only_as_sent(requests, rows),
        *refusals_stored_nothing(requests, rows),
        *limits_held(requests, faults, limit, window),
        *faults_healed(faults),
        *converged_in_time(converged),
    ]


def answers_are_contracts(requests: list[dict]) -> list[Violation]:
    """A 200 is the plant sent; a refusal is a 429 THROTTLED or a 503 Error body; no answer is ambiguous."""
    found = []
    for request in requests:
        status, answer = request["status"], request["answer"]
        if status is None:
            continue
        if status == 200 and answer == request["body"]:
            continue
        if status in REFUSALS and isinstance(answer, dict) and answer.get("error") == REFUSALS[status]:
            if isinstance(answer.get("message"), str) and set(answer) == {"error", "message"}:
                continue
        found.append(Violation("answer outside the contract", request["sent"], describe(request)))
    return found


def answered_in_time(requests: list[dict]) -> list[Violation]:
    return [
        Violation(f"not answered within {ANSWER_WITHIN_S:g} s", request["sent"], describe(request))
        for request in requests
        if request["answered"] - request["sent"] > ANSWER_WITHIN_S
    ]


def stored_as_acknowledged(requests: list[dict], rows: dict[int, dict]) -> list[Violation]:
    """Every create answered 200 is stored, with exactly the body sent."""
    return [
        Violation(
            "acknowledged create not stored as sent",
            request["sent"],
            f"{describe(request)}; stored: {rows.get(request['id'])}",
        )
        for request in requests
        if request["status"] == 200 and rows.get(request["id"]) != request["body"]
    ]


def stored_only_as_sent(requests: list[dict], rows: dict[int, dict]) -> list[Violation]:
    """Every row stored is a body some client sent (an ambiguous create is stored with it, or absent)."""
    sent = {request["id"]: request for request in requests}
    return [
        Violation("row stored with a body never sent", sent[plant_id]["sent"] if plant_id in sent else 0.0,
                  f"stored {row}; sent {sent[plant_id]['body'] if plant_id in sent else 'nothing with this id'}")
        for plant_id, row in sorted(rows.items())
        if plant_id not in sent or sent[plant_id]["body"] != row
    ]  # fmt: skip


def refusals_stored_nothing(requests: list[dict], rows: dict[int, dict]) -> list[Violation]:
    """A create answered only with refusals that say nothing was stored (429) is absent."""
    statuses = defaultdict(set)
    for request in requests:
        statuses[request["id"]].add(request["status"])
    return [
        Violation("a create refused 429 was stored", 0.0, f"id {plant_id}: answers {sorted(statuses[plant_id])}")
        for plant_id in sorted(rows)
        if statuses.get(plant_id) == {429}
    ]


def limits_held(requests: list[dict], faults: list[dict], limit: int, window: int) -> list[Violation]:
    """No token was served past its limit but as docs/api.md allows: each Redis restart grants a window's
    quota once more, and while Redis is stopped requests are served uncounted (no RateLimit header)."""
    redis_down = [
        (fault["started"], fault["healed"] + REDIS_MARGIN_S) for fault in faults if fault["kind"] == "redis-stopped"
    ]
    found, counted = [], defaultdict(int)
    for request in requests:
        if request["status"] != 200:
            continue
        if not request["counted"]:
            if not any(start <= request["answered"] and request["sent"] <= end for start, end in redis_down):
                found.append(Violation("served uncounted while Redis was up", request["sent"], describe(request)))
            continue
        first, last = math.floor(request["sent"] / window), math.floor(request["answered"] / window)
        if first == last:  # only those surely counted in one window
            counted[request["client"], first] += 1
    for (client, number), served in sorted(counted.items()):
        start, end = number * window, (number + 1) * window
        restarts = sum(1 for down, up in redis_down if down < end and up - REDIS_MARGIN_S > start)
        if served > limit * (1 + restarts):
            detail = f"client {client}: {served} creates counted and served in the window from {start}, limit {limit}"
            found.append(
                Violation("token served past its limit", float(start), f"{detail} ({restarts} Redis restarts)")
            )
    return found


def faults_healed(faults: list[dict]) -> list[Violation]:
    return [Violation("fault not healed", fault["started"], f"{fault}") for fault in faults if "heal_failed" in fault]


def converged_in_time(converged: list[dict]) -> list[Violation]:
    found = []
    for record in converged:
        if record["converged"] is None or record["converged"] - record["healed"] > CONVERGE_WITHIN_S:
            found.append(
                Violation(
                    f"not converged within {CONVERGE_WITHIN_S:g} s of the last heal", record["healed"], f"{record}"
                )
            )
    return found or ([] if converged else [Violation("convergence never checked", 0.0, "no converged record")])


def ambiguous_outcomes(requests: list[dict], rows: dict[int, dict]) -> tuple[int, int]:
    """The creates never answered but ambiguously (no answer, or 503) by the run's end: how many were
    stored (with their body: stored_only_as_sent), and how many are absent."""
    last = {}
    for request in requests:
        last[request["id"]] = request["status"]
    ambiguous = [plant_id for plant_id, status in last.items() if status in (None, 503)]
    stored = sum(1 for plant_id in ambiguous if plant_id in rows)
    return stored, len(ambiguous) - stored


def describe(request: dict) -> str:
    took = request["answered"] - request["sent"]
    return (
        f"{request['client']} id {request['id']} attempt {request['attempt']}: {request['status']} after {took:.2f} s,"
        f" sent {request['body']}, answered {str(request['answer'])[:200]}"
    )


def explain(violation: Violation, records: list[dict], started_at: float, seconds: float = 5.0) -> str:
    """The violation, the faults around it, and the requests sent within `seconds` of it."""
    at = violation.at
    lines = [f"{violation.rule} at +{at - started_at:.1f} s: {violation.detail}"]
    for record in records:
        if record["type"] == "fault" and record["started"] - seconds <= at <= record.get("healed", at) + seconds:
            span = f"+{record['started'] - started_at:.1f} s to +{record['healed'] - started_at:.1f} s"
            lines.append(f"  fault {record['kind']} ({record.get('target')}) {span} {record['note']}")
    near = [record for record in records if record["type"] == "request" and abs(record["sent"] - at) <= seconds]
    for record in near[:20]:
        lines.append(f"  +{record['sent'] - started_at:.2f} s {describe(record)}")
    if len(near) > 20:
        lines.append(f"  … and {len(near) - 20} more requests")
    return "\n".join(lines)
