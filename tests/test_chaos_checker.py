"""make chaos's checker, schedule and report on made-up histories: each rule of the contract it checks
fails on the history that breaks it. No server runs (localcluster/chaos/)."""

import json
import re
import threading
import time

from deploy.processes import wait_until
from localcluster.chaos.checker import ANSWER_WITHIN_S, CONVERGE_WITHIN_S, ambiguous_outcomes, check, explain
from localcluster.chaos.faults import FAULTS, Fault
from localcluster.chaos.history import History, read_history
from localcluster.chaos.nemesis import Nemesis, Planned, draw_schedule
from localcluster.chaos.report import plot, summary

START = 1_800_000_000.0  # a window's start for a limit of 10 per 10 s
LIMIT, WINDOW = 10, 10
UNAVAILABLE = {"error": 50300, "message": "The service cannot reach its database; retry later."}


def request(plant_id, status, at, took=0.05, answer=None, counted=True, client="c1", attempt=1, body=None):
    body = body or {"id": plant_id, "name": f"plant {plant_id}"}
    answer = body if answer is None and status == 200 else answer
    return {
        "type": "request", "client": client, "id": plant_id, "body": body, "attempt": attempt,
        "sent": START + at, "answered": START + at + took, "status": status, "answer": answer, "counted": counted,
    }  # fmt: skip


def fault(kind, start, end, **more):
    layer = FAULTS[kind].layer
    return {
        "type": "fault",
        "kind": kind,
        "layer": layer,
        "started": START + start,
        "healed": START + end,
        "note": "",
        **more,
    }


def converged(healed_at=9.0, after=3.0):
    return {"type": "converged", "healed": START + healed_at, "converged": START + healed_at + after}


def good_history():
    """A create answered 200; one retried after a 503 then answered 200; one never answered, stored;
    one never answered, absent; all within a primary killed."""
    return [
        request(1, 200, 0.5),
        request(2, 503, 1.0, answer=UNAVAILABLE),
        request(2, 200, 1.5, attempt=2),
        request(3, None, 2.0, took=3.0, answer="ConnectionResetError: reset"),
        request(4, None, 2.1, took=3.0, answer="RemoteDisconnected: closed"),
        fault("primary-killed", 0.8, 6.0, target="node1"),
        converged(),
    ]


def stored(*plant_ids):
    return {plant_id: {"id": plant_id, "name": f"plant {plant_id}"} for plant_id in plant_ids}


def rules(records, rows):
    return [violation.rule for violation in check(records, rows, LIMIT, WINDOW)]


def test_a_history_that_keeps_the_contract_has_no_violation_with_an_ambiguous_create_stored_or_absent():
    assert rules(good_history(), stored(1, 2, 3)) == []


def test_the_creates_left_ambiguous_are_counted_stored_or_absent():
    requests = [record for record in good_history() if record["type"] == "request"]
    assert ambiguous_outcomes(requests, stored(1, 2, 3)) == (1, 1)


def test_an_acknowledged_create_lost_is_a_violation():
    assert rules(good_history(), stored(2, 3)) == ["acknowledged create not stored as sent"]


def test_an_acknowledged_create_stored_with_another_body_is_a_violation():
    rows = {**stored(2, 3), 1: {"id": 1, "name": "another"}}
    assert rules(good_history(), rows) == [
        "acknowledged create not stored as sent",
        "row stored with a body never sent",
    ]


def test_a_row_with_an_id_never_sent_is_a_violation():
    assert rules(good_history(), stored(1, 2, 3, 99)) == ["row stored with a body never sent"]


def test_a_500_a_503_without_its_error_body_and_a_200_naming_another_plant_are_violations():
    records = [
        *good_history(),
        request(5, 500, 3.0, answer={"error": 50000, "message": "Internal server error."}),
        request(6, 503, 3.1, answer="<html>503</html>"),
        request(7, 200, 3.2, answer={"id": 7, "name": "not what was sent"}),
    ]
    assert rules(records, stored(1, 2, 3, 7)) == ["answer outside the contract"] * 3


def test_a_400_on_a_careful_retry_is_a_violation():
    duplicate = {"error": 40003, "message": "A plant with id 2 already exists with a different name or tag."}
    records = [*good_history(), request(2, 400, 2.5, answer=duplicate, attempt=3)]
    assert rules(records, stored(1, 2, 3)) == ["answer outside the contract"]


def test_an_answer_after_10_s_or_none_within_it_is_a_violation():
    late = [request(5, 200, 3.0, took=ANSWER_WITHIN_S + 0.5), request(6, None, 3.0, took=12.0, answer="TimeoutError")]
    assert rules([*good_history(), *late], stored(1, 2, 3, 5)) == [f"not answered within {ANSWER_WITHIN_S:g} s"] * 2


def test_a_create_refused_429_then_stored_is_a_violation():
    throttled = {"error": 42900, "message": "Request was throttled."}
    records = [*good_history(), request(5, 429, 3.0, answer=throttled)]
    assert rules(records, stored(1, 2, 3)) == []
    assert rules(records, stored(1, 2, 3, 5)) == ["a create refused 429 was stored"]


def test_a_token_served_past_its_limit_is_a_violation_unless_a_redis_restart_allows_it():
    creates = [request(100 + n, 200, 0.1 + n * 0.05, client="limited") for n in range(2 * LIMIT)]
    rows = stored(1, 2, 3, *range(100, 100 + 2 * LIMIT))
    assert rules([*good_history(), *creates], rows) == ["token served past its limit"]
    restarted = fault("redis-stopped", 0.2, 0.4)
    assert rules([*good_history(), *creates, restarted], rows) == []


def test_a_create_served_uncounted_is_a_violation_unless_redis_was_stopped():
    uncounted = request(5, 200, 3.0, counted=False)
    assert rules([*good_history(), uncounted], stored(1, 2, 3, 5)) == ["served uncounted while Redis was up"]
    redis_stopped = fault("redis-stopped", 2.5, 4.0)
    assert rules([*good_history(), uncounted, redis_stopped], stored(1, 2, 3, 5)) == []


def test_a_fault_not_healed_or_a_cluster_not_converged_in_time_is_a_violation():
    records = [*good_history(), fault("standby-stopped", 1.0, 2.0, heal_failed="RuntimeError('no')")]
    assert rules(records, stored(1, 2, 3)) == ["fault not healed"]
    slow = [record for record in good_history() if record["type"] != "converged"] + [
        converged(after=CONVERGE_WITHIN_S + 1)
    ]
    assert rules(slow, stored(1, 2, 3)) == [f"not converged within {CONVERGE_WITHIN_S:g} s of the last heal"]


def test_a_violation_is_told_with_the_faults_and_requests_around_it():
    (violation,) = check(good_history(), stored(2, 3), LIMIT, WINDOW)
    text = explain(violation, good_history(), START)
    assert text.startswith("acknowledged create not stored as sent at +0.5 s: c1 id 1 attempt 1: 200")
    assert "fault primary-killed (node1) +0.8 s to +6.0 s" in text and "c1 id 2 attempt 2: 200" in text


def test_a_seed_draws_the_same_schedule_and_never_two_faults_of_one_layer_at_once():
    schedule = draw_schedule(62, 1200)
    assert schedule == draw_schedule(62, 1200) != draw_schedule(63, 1200)
    assert {planned.kind for planned in schedule} == set(FAULTS)
    for earlier, later in zip(schedule, schedule[1:], strict=False):
        assert earlier.at < later.at
    for kind in FAULTS.values():
        mine = [planned for planned in schedule if FAULTS[planned.kind].layer == kind.layer]
        for earlier, later in zip(mine, mine[1:], strict=False):
            assert earlier.at + earlier.lasts + FAULTS[earlier.kind].settles <= later.at
    assert all(planned.at + planned.lasts <= 1200 for planned in schedule)


def test_the_summary_gives_each_kind_its_worst_unavailability_refusals_and_p99(tmp_path):
    history = History(tmp_path / "history.jsonl")
    for record in good_history():
        history.add(record)
    history.close()
    records = read_history(tmp_path / "history.jsonl")
    assert records == json.loads(json.dumps(good_history()))
    assert summary(records) == {
        "primary-killed": {
            "faults": 1,
            "not_started": 0,
            "worst_unavailable_s": 1.0,
            "refused": 3,
            "requests": 4,
            "p99_s": 3.0,
        }
    }
    svg = plot(records, START, "a run")
    assert (
        svg.startswith("<svg") and "primary-killed" in svg and svg.count("<polyline") == 5
    )  # 200, 503, no answer; median, slowest
    # The fault's span shaded: 0.8 s to 6.0 s of the 6 s plotted, on the 1,020 px from x = 60.
    assert re.findall(r'<rect x="([\d.]+)" y="\d+" width="([\d.]+)"', svg) == [("196.0", "884.0")]


class Recorded(Fault):
    """A fault that only records when it starts and heals."""

    layer = "database"
    events: list = []

    def __init__(self, topology, choice):
        self.choice = choice

    def start(self):
        Recorded.events.append(("start", self.choice, time.monotonic()))
        return f"target {self.choice}"

    def heal(self):
        Recorded.events.append(("heal", self.choice, time.monotonic()))


class Refused(Recorded):
    layer = "redis"

    def start(self):
        raise RuntimeError("the formation refuses")


def test_the_nemesis_never_overlaps_two_faults_of_one_layer_records_each_and_heals_what_it_started(monkeypatch):
    monkeypatch.setattr("localcluster.chaos.nemesis.FAULTS", {"recorded": Recorded, "refused": Refused})
    Recorded.events = []
    history = History()
    schedule = [Planned("recorded", 0.0, 0.3, 1), Planned("recorded", 0.1, 0.1, 2), Planned("refused", 0.1, 0.1, 3)]
    Nemesis(None, schedule, history, time.time(), say=lambda line: None).run()
    assert [(event, choice) for event, choice, _ in Recorded.events] == [
        ("start", 1),
        ("heal", 1),
        ("start", 2),
        ("heal", 2),
    ]
    faults = history.of_type("fault")
    assert [(fault["choice"], fault["target"], fault["note"]) for fault in faults] == [
        (3, None, "did not start: RuntimeError('the formation refuses')"),
        (1, "target 1", ""),
        (2, "target 2", ""),
    ]
    assert all(fault["healed"] >= fault["started"] for fault in faults)


def test_the_nemesis_stopped_early_heals_every_fault_it_started_and_starts_no_more(monkeypatch):
    monkeypatch.setattr("localcluster.chaos.nemesis.FAULTS", {"recorded": Recorded})
    Recorded.events = []
    nemesis = Nemesis(
        None,
        [Planned("recorded", 0.0, 60, 1), Planned("recorded", 0.2, 1, 2)],
        History(),
        time.time(),
        say=lambda line: None,
    )
    threading.Thread(target=nemesis.run, daemon=True).start()
    wait_until(lambda: Recorded.events, None, 5, "the first fault")
    nemesis.abort()
    time.sleep(0.5)
    assert [(event, choice) for event, choice, _ in Recorded.events] == [("start", 1), ("heal", 1)]
