"""The nemesis: a schedule of faults drawn from a seed, played against the topology, every fault healed.

The same seed and duration draw the same schedule (kinds, offsets, durations, choices): `SEED=` replays
a run's faults, at the same offsets from the load's start. Faults of different layers overlap; those of
one layer never do (a fault waits for the one before it in its layer to be healed).
"""

import random
import threading
import time
from dataclasses import asdict, dataclass

from localcluster.chaos.faults import FAULTS
from localcluster.chaos.history import History

# Seconds of load before the first fault, and kept clear of faults at the end of the run.
LEAD_IN_S = 10.0
TAIL_S = 10.0
# Between the starts of two faults, drawn: short enough that many overlap the one before.
GAP_S = (3.0, 20.0)


@dataclass(frozen=True)
class Planned:
    """One fault of a schedule: its kind, when it starts (seconds after the load's start), how long
    until it is healed, and its draw for what the kind leaves open."""

    kind: str
    at: float
    lasts: float
    choice: float


def draw_schedule(seed: int, duration: float, kinds: list[str] | None = None) -> list[Planned]:
    """The faults of a run of `duration` seconds, drawn among `kinds` (every kind) by random.Random(seed)."""
    draw = random.Random(seed)
    kinds = sorted(kinds or FAULTS)
    schedule, at, layer_free_at = [], LEAD_IN_S, {}
    while True:
        at += draw.uniform(*GAP_S)
        if at > duration - TAIL_S:
            return schedule
        free = [kind for kind in kinds if layer_free_at.get(FAULTS[kind].layer, 0.0) <= at]
        if not free:
            continue
        kind = draw.choice(free)
        fault = FAULTS[kind]
        lasts, choice = round(draw.uniform(*fault.lasts), 1), round(draw.random(), 3)
        if at + lasts > duration - TAIL_S:
            continue
        schedule.append(Planned(kind, round(at, 1), lasts, choice))
        layer_free_at[fault.layer] = at + lasts + fault.settles


class Nemesis:
    """Plays `schedule` against `topology` from `started_at` (time.time()), each fault in a thread of its
    own; each fault's record goes to `history` once it is healed (or could not start)."""

    def __init__(self, topology, schedule: list[Planned], history: History, started_at: float, say=print):
        self.topology, self.schedule, self.history = topology, schedule, history
        self.started_at, self.say = started_at, say
        # What starts and heals a fault: on the topology's threads, which outlive what they start.
        self.call = topology.call if topology is not None else lambda action: action()
        self.layers = {fault.layer: threading.Lock() for fault in FAULTS.values()}
        self.active: list = []  # the faults started and not healed yet
        self.stopped = threading.Event()  # abort(): no fault starts any more
        self.lock = threading.Lock()

    def heal(self, fault) -> None:
        """Heal `fault` unless it is healed already (by abort())."""
        with self.lock:
            if fault not in self.active:
                return
            self.active.remove(fault)
        self.call(fault.heal)

    def abort(self) -> None:
        """Start no more faults, and heal every one started and not healed yet."""
        self.stopped.set()
        for fault in list(self.active):
            try:
                self.heal(fault)
            except Exception as error:
                self.say(f"could not heal {type(fault).__name__}: {error!r}")

    def run(self) -> None:
        """Play every fault; return once each is healed."""
        threads = [threading.Thread(target=self.play, args=(planned,), daemon=True) for planned in self.schedule]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def play(self, planned: Planned) -> None:
        if self.stopped.wait(max(0.0, self.started_at + planned.at - time.time())):
            return
        kind = FAULTS[planned.kind]
        with self.layers[kind.layer]:
            if self.stopped.is_set():
                return
            fault = kind(self.topology, planned.choice)
            record = {"type": "fault", **asdict(planned), "layer": kind.layer, "started": time.time(), "note": ""}
            with self.lock:
                self.active.append(fault)
            try:
                record["target"] = self.call(fault.start)
            except Exception as error:  # a fault the formation's state refuses (a switchover without a standby)
                with self.lock:
                    self.active.remove(fault)
                record.update(target=None, note=f"did not start: {error!r}"[:400], healed=time.time())
                self.say(f"+{record['started'] - self.started_at:6.1f} s  {planned.kind}: {record['note']}")
                self.history.add(record)
                return
            self.say(f"+{record['started'] - self.started_at:6.1f} s  {planned.kind} ({record['target']})")
            self.stopped.wait(max(0.0, record["started"] + planned.lasts - time.time()))
            try:
                self.heal(fault)
            except Exception as error:
                record["heal_failed"] = repr(error)[:400]
            record["healed"] = time.time()
            self.say(
                f"+{record['healed'] - self.started_at:6.1f} s  {planned.kind} healed {record.get('heal_failed', '')}"
            )
            self.history.add(record)
