"""A planned switchover of the pg_auto_failover pair that loses no acknowledged create.

    python -m deploy.switchover --monitor MONITOR_URI [--user postgres] [--dbname postgres]

MONITOR_URI is what `pg_autoctl show uri --monitor` prints; --user and --dbname are a superuser's, to
reach the primary at the host and port the monitor has for it (a password from ~/.pgpass or
PGPASSWORD, as libpq reads them). Exit 0 once the standby is the primary and the old primary its
standby; 1, with the reason, when the pair is not ready for one or it did not complete.

`pg_autoctl perform switchover` alone can lose creates the old primary acknowledged. pg_auto_failover's
monitor (2.0 to 2.2, src/monitor/node_active_protocol.c: NodeActive) reads a keeper's node row before it
waits for the group's lock: when the primary's keeper reports in the moment the switchover is
assigned, the monitor then judges it on its old goal, finds its standby (already told to promote) out
of the quorum, and moves it to `wait_primary`, so it stops waiting for the standby. It takes writes
alone until it is told to demote, about 3 s later, and those are gone once it rejoins the new
primary (tests/test_failover.py reproduces it).

So the primary is fenced first: `default_transaction_read_only` on, which pg_auto_failover itself
sets on a standby it promotes and which libpq's `target_session_attrs=read-write` (the app servers'
DATABASE_URL) skips; then its client sessions are ended, so that none goes on writing; then the
switchover is asked of the monitor. The app servers answer 503 meanwhile, as they do while the
primary drains anyway, and their next connection finds the new primary. Once the old primary is the
new one's standby the fence is undone there (not every promotion pg_auto_failover makes sets the
setting anew). A switchover the monitor refused is undone at once; one whose fate is unknown (the
monitor not answering) leaves the primary fenced, and the message says how to undo it.
"""

import argparse
import sys
import time

import psycopg
from psycopg.conninfo import make_conninfo

from deploy.processes import wait_until

# The monitor's own limit for a switchover to complete (pg_autoctl perform switchover --wait).
WAIT_S = 60
# How many times the switchover is asked when the monitor rolls it back for a deadlock with a keeper's
# report (seen with pg_auto_failover 2.0 under load): nothing was assigned, so it is asked again.
ATTEMPTS = 3


class NotSwitched(Exception):
    """Why the pair was not switched over, or was but its last step failed, for the operator."""


def nodes(monitor: str, formation: str, group: int) -> list[tuple[str, str, int, str, str]]:
    """The group's nodes as the monitor has them: (name, host, port, reported state, assigned state)."""
    query = (
        "SELECT nodename, nodehost, nodeport, reportedstate, goalstate FROM pgautofailover.node"
        " WHERE formationid = %s AND groupid = %s ORDER BY nodeid"
    )
    with psycopg.connect(monitor, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(query, [formation, group]).fetchall()


def pair(monitor: str, formation: str, group: int) -> tuple[tuple[str, str, int], tuple[str, str, int]]:
    """The primary's and its standby's (name, host, port), when the monitor has both settled there."""
    found = nodes(monitor, formation, group)
    primaries = [node[:3] for node in found if node[3:] == ("primary", "primary")]
    standbys = [node[:3] for node in found if node[3:] == ("secondary", "secondary")]
    if len(found) != 2 or len(primaries) != 1 or len(standbys) != 1:
        states = ", ".join(f"{name} {reported}/{goal}" for name, _, _, reported, goal in found)
        raise NotSwitched(f"the pair is not one primary and one secondary, settled (pg_autoctl show state): {states}")
    return primaries[0], standbys[0]


UNFENCE = "ALTER SYSTEM RESET default_transaction_read_only; SELECT pg_reload_conf();"


def check_primary(primary: str) -> None:
    """Refuse a primary (a superuser's conninfo) that acknowledges creates alone, or that some earlier
    fence (or an operator) has made read-only: the fence's undo would make that one writable."""
    with psycopg.connect(primary, autocommit=True, connect_timeout=5) as conn:
        names = conn.execute("SHOW synchronous_standby_names").fetchone()[0]
        (synchronous,) = conn.execute(
            "SELECT count(*) FROM pg_stat_replication WHERE sync_state IN ('sync', 'quorum')"
        ).fetchone()
        read_only = conn.execute("SHOW default_transaction_read_only").fetchone()[0]
    if not names or not synchronous:
        raise NotSwitched(
            "the primary has no synchronous standby (synchronous_standby_names, pg_stat_replication): it"
            " acknowledges creates alone, and a switchover now would lose those its standby has not received"
        )
    if read_only == "on":
        raise NotSwitched(
            "the primary is read-only already (default_transaction_read_only on): a fence an earlier switchover"
            f" left? On the primary, once it should take writes: {UNFENCE}"
        )


def fence(primary: str) -> None:
    """Make the primary take no more writes: read-only for every session from now on, and every client
    session ended (a commit waiting for the standby then ends unacknowledged); then check it again."""
    with psycopg.connect(primary, autocommit=True, connect_timeout=5) as conn:
        conn.execute("ALTER SYSTEM SET default_transaction_read_only = on")
        conn.execute("SELECT pg_reload_conf()")
        # The postmaster rereads its settings when signalled, not at once: a session started once it
        # has is read-only from its first transaction on, and one started before rereads them before
        # its next command, or is ended below.
        try:
            wait_until(lambda: setting(primary, "default_transaction_read_only") == "on", None, 10, "the fence")
        except RuntimeError:
            raise NotSwitched("the primary did not take default_transaction_read_only = on within 10 s") from None
        conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        (names,) = conn.execute("SHOW synchronous_standby_names").fetchone()
    if not names:
        raise NotSwitched("the primary's synchronous_standby_names was emptied while it was fenced")


def unfence(conninfo: str, timeout: float = 0) -> None:
    """Undo the fence (a standby takes it too); retried for `timeout` s while the node does not answer."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                conn.execute("ALTER SYSTEM RESET default_transaction_read_only")
                conn.execute("SELECT pg_reload_conf()")
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def setting(conninfo: str, name: str) -> str:
    with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
        return conn.execute(f"SHOW {name}").fetchone()[0]


def perform(monitor: str, formation: str, group: int) -> None:
    """Ask the monitor for the switchover (what `pg_autoctl perform switchover` asks)."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with psycopg.connect(monitor, autocommit=True, connect_timeout=5) as conn:
                conn.execute("SELECT pgautofailover.perform_failover(%s, %s)", [formation, group])
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == ATTEMPTS:
                raise


def wait_until_switched(monitor: str, formation: str, group: int, standby: str, timeout: float = WAIT_S) -> None:
    """Until the monitor has `standby` the primary and every other node its secondary, all so reported
    (a monitor that does not answer for a moment is asked again)."""
    deadline, found = time.monotonic() + timeout, None
    while True:
        try:
            found = {name: (reported, goal) for name, _, _, reported, goal in nodes(monitor, formation, group)}
        except psycopg.OperationalError as error:
            found = found or str(error)
        if isinstance(found, dict) and all(
            state == (("primary",) * 2 if name == standby else ("secondary",) * 2) for name, state in found.items()
        ):
            return
        if time.monotonic() > deadline:
            raise NotSwitched(
                f"not switched over within {timeout:.0f} s (pg_autoctl show state): {found}. The old primary"
                f" stays read-only; once the monitor has it a secondary, or if it is the primary again: {UNFENCE}"
            )
        time.sleep(0.2)


def switchover(monitor: str, user: str, dbname: str, formation: str = "default", group: int = 0) -> str:
    """The whole switchover; the new primary's name."""
    (_, host, port), (standby, _, _) = pair(monitor, formation, group)
    primary = make_conninfo(host=host, port=port, user=user, dbname=dbname)
    check_primary(primary)
    try:
        fence(primary)
        perform(monitor, formation, group)
    except (NotSwitched, psycopg.Error) as error:
        # Undone only where the monitor assigned nothing (it answered, and has the pair as it was):
        # a switchover it took goes on, and the fence must hold until the old primary is demoted.
        try:
            pair(monitor, formation, group)
            unfence(primary)
        except (NotSwitched, psycopg.Error):
            message = f"{error}; the primary stays fenced (read-only) until the monitor settles: {UNFENCE}"
            raise NotSwitched(message) from error
        raise
    wait_until_switched(monitor, formation, group, standby)
    # The fence stays in the old primary's postgresql.auto.conf (pg_rewind leaves the file when no
    # rewind is needed), and not every promotion pg_auto_failover makes sets the setting anew: left
    # there, a later failover back to it would promote a server that refuses every write.
    try:
        unfence(primary, timeout=30)
    except psycopg.Error as error:
        raise NotSwitched(
            f"switched over: {standby} is the primary, but the old primary's fence could not be lifted ({error});"
            f" before it can be the primary again, on it: {UNFENCE}"
        ) from error
    return standby


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.switchover", description=__doc__.splitlines()[0])
    parser.add_argument("--monitor", required=True, help="the monitor's URI (pg_autoctl show uri --monitor)")
    parser.add_argument("--user", default="postgres", help="a superuser of the data nodes")
    parser.add_argument("--dbname", default="postgres", help="a database of the data nodes to connect to")
    parser.add_argument("--formation", default="default")
    parser.add_argument("--group", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        new_primary = switchover(args.monitor, args.user, args.dbname, args.formation, args.group)
    except (NotSwitched, psycopg.Error) as error:
        sys.stderr.write(f"switchover: {error}\n")
        return 1
    sys.stdout.write(f"switchover: {new_primary} is the primary\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
