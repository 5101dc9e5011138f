"""deploy/standby_guard.py's decisions, on the rows the monitor and the primary would give it (no server).

tests/test_failover.py stalls a standby's replication under load with the guard running beside the monitor.
"""

import psycopg

from deploy.standby_guard import RELEASE, Guard

PRIMARY = (1, "node1", "10.0.0.1", 5432, "primary", "primary", 0.3, True)


def standby(reported="secondary", goal="secondary", report_age=0.3, up=True):
    return (2, "node2", "10.0.0.2", 5432, reported, goal, report_age, up)


class Recorded(Guard):
    """A guard whose monitor holds `nodes` and whose primary answers `answers` (one per query), in order."""

    def __init__(self, nodes, answers):
        super().__init__("postgres://monitor", "postgres", "postgres")
        self.nodes, self.answers, self.calls, self.sent = nodes, list(answers), [], []

    def monitor_call(self, sql, *arguments):
        if sql.lstrip().startswith("SELECT nodeid"):
            return self.nodes
        self.calls.append((sql, arguments))
        return [(True,)]

    def node(self, host, port, sql, *arguments):
        self.sent.append((host, sql))
        return self.answers.pop(0)


def test_standby_that_confirms_nothing_while_its_keeper_reports_and_a_commit_waits_2_s_is_put_in_maintenance():
    guard = Recorded(
        [PRIMARY, standby(report_age=0.3)], [(1.9, "0/3000060", "0/2000000"), (2.4, "0/3000060", "0/2000000")]
    )

    guard.check()
    guard.check()

    assert guard.calls == [("SELECT pgautofailover.start_maintenance(%s)", (2,))]
    assert guard.held == (2, "node2", "0/3000060")


def test_commits_waiting_under_2_s_change_nothing():
    guard = Recorded([PRIMARY, standby()], [(1.9, "0/3000060", None), (1.9, "0/3000060", None)])

    guard.check()
    guard.check()

    assert (guard.calls, guard.held) == ([], None)


def test_standby_whose_keeper_has_not_reported_since_the_commit_began_is_left_to_the_monitor():
    # A lost standby: its keeper's last report is older than the wait, or the monitor's checks fail.
    for lost in (standby(report_age=2.5), standby(report_age=0.3, up=False)):
        guard = Recorded([PRIMARY, lost], [(2.4, "0/3000060", None), (2.4, "0/3000060", None)])

        guard.check()
        guard.check()

        assert (guard.calls, guard.held) == ([], None)


def test_standby_catching_up_is_left_to_finish():
    # After a partition healed: the commits have waited long, the standby confirms more at each check.
    answers = [(20.0, "0/3000060", "0/2000000"), (20.5, "0/3000090", "0/2800000"), (21.0, "0/30000c0", "0/3000000")]
    guard = Recorded([PRIMARY, standby()], answers)

    for _ in answers:
        guard.check()

    assert (guard.calls, guard.held) == ([], None)


def test_pair_not_settled_is_left_to_the_monitor():
    for nodes in (
        [PRIMARY, standby(goal="catchingup")],
        [PRIMARY, standby(reported="maintenance", goal="maintenance")],
    ):
        guard = Recorded(nodes, [])

        guard.check()

        assert (guard.calls, guard.held) == ([], None)


WAIT_PRIMARY = PRIMARY[:4] + ("wait_primary", "wait_primary") + PRIMARY[6:]


def test_maintenance_ends_once_the_standby_has_confirmed_the_wal_written_before_it():
    # The first answer of each: the commits released (none), the second: whether the standby confirmed.
    waiting = Recorded([WAIT_PRIMARY, standby("maintenance", "maintenance")], [(0,), (0,)])
    waiting.held = (2, "node2", "0/3000060")
    waiting.check()
    confirmed = Recorded([WAIT_PRIMARY, standby("maintenance", "maintenance")], [(0,), (1,)])
    confirmed.held = (2, "node2", "0/3000060")

    confirmed.check()

    assert (waiting.calls, waiting.held) == ([], (2, "node2", "0/3000060"))
    assert confirmed.calls == [("SELECT pgautofailover.stop_maintenance(%s)", (2,))] and confirmed.held is None


def test_maintenance_ended_by_someone_else_is_no_longer_held():
    guard = Recorded([PRIMARY, standby("maintenance", "catchingup")], [])
    guard.held = (2, "node2", "0/3000060")

    guard.check()

    assert (guard.calls, guard.held) == ([], None)


def test_commits_left_waiting_once_the_primary_is_wait_primary_are_released_on_the_primary():
    # The checkpointer, busy with a checkpoint, has not yet woken them: the guard cancels their wait.
    for held in (None, (2, "node2", "0/3000060")):
        guard = Recorded([WAIT_PRIMARY, standby("maintenance", "maintenance")], [(3,), (0,)])
        guard.held = held

        guard.check()

        assert guard.sent[0] == ("10.0.0.1", RELEASE) and guard.calls == []


def test_commits_are_never_released_while_the_primary_waits_for_a_secondary():
    guard = Recorded([PRIMARY, standby()], [(2.4, "0/3000060", None), (2.4, "0/3000060", None)])

    guard.check()
    guard.check()

    assert RELEASE not in [sql for _, sql in guard.sent]


def test_commits_are_never_released_once_the_monitor_has_named_the_standby_again():
    # The standby caught up: the monitor's goal for the primary is primary again, its keeper not yet there.
    guard = Recorded([PRIMARY[:4] + ("wait_primary", "primary") + PRIMARY[6:], standby("secondary", "secondary")], [])

    guard.check()

    assert RELEASE not in [sql for _, sql in guard.sent]


def test_a_release_that_fails_stops_no_other_duty():
    class Refused(Recorded):
        def node(self, host, port, sql, *arguments):
            if sql == RELEASE:
                self.sent.append((host, sql))
                raise psycopg.errors.InsufficientPrivilege("permission denied to cancel query")
            return super().node(host, port, sql, *arguments)

    guard = Refused([WAIT_PRIMARY, standby("maintenance", "maintenance")], [(1,)])
    guard.held = (2, "node2", "0/3000060")

    guard.check()

    assert guard.calls == [("SELECT pgautofailover.stop_maintenance(%s)", (2,))] and guard.held is None
