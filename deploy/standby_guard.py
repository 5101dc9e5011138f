"""A synchronous standby whose replication stalls is taken out of the quorum, so commits stop waiting.

    python -m deploy.standby_guard --monitor MONITOR_URI [--user postgres] [--dbname postgres] [--after 2]

Run beside pg_auto_failover's monitor, under a supervisor, for a pair (a primary and one standby).
MONITOR_URI, --user and --dbname are as deploy/switchover.py's: the monitor's URI, and a superuser's
(or a member of pg_monitor's and pg_signal_backend's) to reach the primary at the host and port the
monitor has for it.

pg_auto_failover 2.0 to 2.2 judges a standby by its keeper's reports and its own connection checks
alone: when only the replication stalls (the standby's walreceiver stopped, or the link between the
two nodes cut while the monitor reaches both), the standby stays `secondary`, the primary names it
synchronous, and every commit waits for it for as long as the stall lasts
(hapostgres/pg_auto_failover#997, fixed after 2.2). This guard watches the primary's commits: when the
oldest has waited `--after` seconds for the standby, the standby has confirmed nothing more since the
last check (one catching up, after a partition healed, is left to finish), and its keeper has reported
since that commit began (so the monitor sees it up and will not act itself, as it does for a standby
lost), it
asks the monitor to put the standby in maintenance (`pg_autoctl enable maintenance`'s call). The
monitor then moves the primary to `wait_primary` (no synchronous standby), the waiting commits
complete, flushed on the primary only, and the primary takes creates alone, as it does when the
standby is lost. Once the standby has confirmed the WAL written before that call, it ends the
maintenance (`pg_autoctl disable maintenance`'s call): the standby restarts, catches up, is
`secondary` again, and the primary waits for it again. A maintenance the guard did not start is left
alone. Cancelling the commits' wait instead would be wrong: PostgreSQL then reports each commit done
on the primary alone, while the monitor still counts the standby as a copy it may promote.

Once the primary is in `wait_primary` (the guard's doing or the monitor's, for a standby lost) and its
settings name no synchronous standby, the commits still waiting after `--after` seconds are
cancelled: PostgreSQL's checkpointer wakes them when it reads the new setting, which a checkpoint can
put off (an immediate one, one behind its schedule, its fsyncs on a slow disk: syncrep.c,
checkpointer.c; met in CI, creates waiting past 10 s), and until then each new commit waits too. Each
is reported done on the primary alone, what `wait_primary` promises and what the checkpointer would
have done.
"""

import argparse
import sys
import time

import psycopg
from psycopg.conninfo import make_conninfo

# How long the oldest commit waits for the standby before the guard acts: as long as the monitor
# takes to declare a lost node down with make cluster's timers (node_considered_unhealthy_timeout).
AFTER_S = 2.0
PERIOD_S = 0.5  # between two checks
# Each connection's: a node that does not answer, or whose packets are dropped, is skipped this round.
TIMEOUTS = {"connect_timeout": 2, "tcp_user_timeout": 2000, "keepalives_idle": 1, "keepalives_interval": 1}
# The standby's keeper must have reported this long after the waiting commit began: a keeper that is
# gone (the standby lost, which the monitor notices itself) reported last before it.
REPORTED_AFTER_S = 0.5
NODES = (
    "SELECT nodeid, nodename, nodehost, nodeport, reportedstate, goalstate,"
    " extract(epoch FROM now() - reporttime)::float8, health = 1 AND reportedpgisrunning"
    " FROM pgautofailover.node WHERE formationid = %s AND groupid = %s ORDER BY nodeid"
)
# The oldest commit waiting for the synchronous standby, in seconds (0: none), the WAL written so far,
# and how far the standby has confirmed it (None: not connected).
WAITING = (
    "SELECT coalesce(extract(epoch FROM max(clock_timestamp() - query_start))::float8, 0), pg_current_wal_lsn(),"
    " (SELECT flush_lsn::text FROM pg_stat_replication WHERE application_name = %s)"
    " FROM pg_stat_activity WHERE wait_event_type = 'IPC' AND wait_event = 'SyncRep'"
)
# The commits that have waited `--after` seconds for a standby that the primary's settings files no
# longer name, read as the statement runs (pg_auto_failover writes them, then reloads: a primary named a
# standby again is not released), and how many there were. Cancelling a commit's wait reports it done,
# with a warning; only those the checkpointer has left waiting that long are, so that a transition it
# completes in time is never raced.
RELEASE = (
    "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity WHERE backend_type = 'client backend'"
    " AND wait_event_type = 'IPC' AND wait_event = 'SyncRep' AND clock_timestamp() - query_start >= %s * interval '1 s'"
    " AND coalesce((SELECT setting FROM pg_file_settings WHERE name = 'synchronous_standby_names'"
    " ORDER BY seqno DESC LIMIT 1), '') = ''"
)


def log(message: str) -> None:
    sys.stdout.write(f"standby_guard: {message}\n")
    sys.stdout.flush()


class Guard:
    """One formation's group: check() once per PERIOD_S; `held` is the standby the guard put in maintenance
    (its node id, name, and the primary's WAL position then), until it is released."""

    def __init__(
        self, monitor: str, user: str, dbname: str, formation: str = "default", group: int = 0, after: float = AFTER_S
    ):
        self.monitor, self.user, self.dbname = monitor, user, dbname
        self.formation, self.group, self.after = formation, group, after
        self.held: tuple[int, str, str] | None = None
        # What the standby had confirmed at the last check: one that confirms more is catching up, not stalled.
        self.confirmed: str | None = "unknown"

    def monitor_call(self, sql: str, *arguments) -> list[tuple]:
        with psycopg.connect(self.monitor, autocommit=True, **TIMEOUTS) as conn:
            return conn.execute(sql, arguments).fetchall()

    def node(self, host: str, port: int, sql: str, *arguments) -> tuple:
        conninfo = make_conninfo(host=host, port=port, user=self.user, dbname=self.dbname, **TIMEOUTS)
        with psycopg.connect(conninfo, autocommit=True) as conn:
            return conn.execute(sql, arguments).fetchone()

    def check(self) -> None:
        nodes = self.monitor_call(NODES, self.formation, self.group)
        for _, _, host, port, *states, _, _ in nodes:
            if states == ["wait_primary", "wait_primary"]:
                try:  # a primary out of reach, or a role that may not cancel, stops no other duty
                    self.release_commits_left_waiting(host, port)
                except psycopg.Error as error:
                    log(f"releasing the commits left waiting: {type(error).__name__}: {str(error).strip()}")
        if self.held is None:
            self.take_out_if_stalled(nodes)
        else:
            self.release_once_caught_up(nodes)

    def take_out_if_stalled(self, nodes: list[tuple]) -> None:
        primaries = [node for node in nodes if node[4:6] == ("primary", "primary")]
        standbys = [node for node in nodes if node[4:6] == ("secondary", "secondary")]
        if len(nodes) != 2 or len(primaries) != 1 or len(standbys) != 1:
            return  # not a settled pair: the monitor is deciding
        (_, _, host, port, *_), (standby_id, name, *_, report_age, up) = primaries[0], standbys[0]
        waited, lsn, confirmed = self.node(host, port, WAITING, f"pgautofailover_standby_{standby_id}")
        stalled, self.confirmed = confirmed == self.confirmed, confirmed
        if waited >= self.after and up and report_age < waited - REPORTED_AFTER_S and stalled:
            self.monitor_call("SELECT pgautofailover.start_maintenance(%s)", standby_id)
            self.held = (standby_id, name, lsn)
            log(f"a commit has waited {waited:.1f} s for {name}, whose keeper reports: {name} put in maintenance")

    def release_commits_left_waiting(self, host: str, port: int) -> None:
        (released,) = self.node(host, port, RELEASE, self.after)
        if released:
            log(f"{released} commits still waiting for a standby the primary no longer names: released")

    def release_once_caught_up(self, nodes: list[tuple]) -> None:
        standby_id, name, lsn = self.held
        standby = next((node for node in nodes if node[0] == standby_id), None)
        if standby is None or "maintenance" not in standby[5]:
            self.held = None  # dropped, or taken out of maintenance by someone else
            log(f"{name} no longer held in maintenance by the guard")
            return
        primary = next((node for node in nodes if node[5] in ("wait_primary", "primary")), None)
        if standby[4:6] != ("maintenance", "maintenance") or primary is None:
            return
        query = "SELECT count(*) FROM pg_stat_replication WHERE application_name = %s AND flush_lsn >= %s::pg_lsn"
        (confirmed,) = self.node(primary[2], primary[3], query, f"pgautofailover_standby_{standby_id}", lsn)
        if confirmed:
            self.monitor_call("SELECT pgautofailover.stop_maintenance(%s)", standby_id)
            self.held = None
            log(f"{name} has confirmed the WAL up to {lsn}: its maintenance ended, it catches up")

    def run(self) -> None:
        log(f"watching formation {self.formation} group {self.group}: a commit waiting {self.after} s for the standby")
        while True:
            try:
                self.check()
            except psycopg.Error as error:
                log(f"{type(error).__name__}: {str(error).strip()}")
            time.sleep(PERIOD_S)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.standby_guard", description=__doc__.splitlines()[0])
    parser.add_argument("--monitor", required=True, help="the monitor's URI (pg_autoctl show uri --monitor)")
    parser.add_argument("--user", default="postgres", help="a superuser, or in pg_monitor and pg_signal_backend")
    parser.add_argument("--dbname", default="postgres")
    parser.add_argument("--formation", default="default")
    parser.add_argument("--after", type=float, default=AFTER_S, help="seconds a commit waits before the guard acts")
    options = parser.parse_args(argv)
    Guard(options.monitor, options.user, options.dbname, options.formation, after=options.after).run()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
