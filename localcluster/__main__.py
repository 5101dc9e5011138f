"""`make cluster` (`python -m localcluster`): production's topology on one machine, until stopped.

The front (nginx, the units' edge rules) on $PORT (default 8000), HAProxy behind it in front of
$CLUSTER_APP_SERVERS (default 2) production units
(deploy/unit.py: nginx in front of the app server, as `make serve` runs one), each its own process
tree as if on its own host; Redis for the shared rate-limit counters (localcluster/cluster.py); a
throwaway PostgreSQL primary and synchronous standby failed over by pg_auto_failover, which the app
servers reach by a connection string that follows the primary, both archiving with pgBackRest into one
repository folder (localcluster/database.py). Signals:
- SIGHUP: a rolling restart (a new version): one unit at a time is drained in HAProxy, stopped once
  its requests are answered, started with the new code, and back in rotation before the next.
- SIGTERM or SIGINT (Ctrl-C): everything stops gracefully; SIGKILL: the servers get SIGTERM.
"""

import os
import secrets
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from deploy.processes import ROOT
from localcluster.cluster import Cluster
from localcluster.database import FailoverDatabase


def prepare_database(env: dict) -> None:
    """Migrate once for all servers (as a deploy does), and collect the admin's static files."""
    for command in (["migrate", "--no-input", "-v", "0"], ["collectstatic", "--no-input", "-v", "0"]):
        subprocess.run([sys.executable, "manage.py", *command], cwd=ROOT, env=env, check=True)


def main() -> int:
    asked: list[str] = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append("stop"))
    signal.signal(signal.SIGINT, lambda *_: asked.append("stop"))
    signal.signal(signal.SIGHUP, lambda *_: asked.append("restart"))
    work_dir = Path(tempfile.mkdtemp(prefix="plantstore-cluster."))
    app_env = {
        "DJANGO_DEBUG": "0",
        "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(50),  # one for all
        "DJANGO_ALLOWED_HOSTS": os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost"),
        "DJANGO_STATIC_ROOT": str(work_dir / "static"),
        "PLANTS_THROTTLE_RATE": os.environ.get("PLANTS_THROTTLE_RATE", "600/minute"),
    }
    database = FailoverDatabase(supervised=True)
    cluster = Cluster(
        None,
        work_dir,
        port=int(os.environ.get("PORT", "8000")),
        app_servers=int(os.environ.get("CLUSTER_APP_SERVERS", "2")),
        supervised=True,
        database_url=database.url,
        **app_env,
    )
    try:
        database.start()
        prepare_database({**os.environ, **app_env, "DATABASE_URL": database.url})
        cluster.start()
        report(cluster, database)
        return watch(cluster, database, asked)
    finally:
        print("stopping the cluster", flush=True)
        cluster.stop()
        database.stop()
        shutil.rmtree(work_dir, ignore_errors=True)


def report(cluster: Cluster, database: FailoverDatabase) -> None:
    units = ", ".join(unit.url for unit in cluster.units)
    nodes = ", ".join(f"{node.name} 127.0.0.1:{node.port}" for node in database.nodes)
    as_postgres = "runuser -u postgres -- " if os.geteuid() == 0 else ""  # the servers' user
    print(
        f"""
  front (nginx)             {cluster.url}      <- clients connect here
  load balancer (HAProxy)   {cluster.haproxy.url}   its metrics: http://127.0.0.1:{cluster.haproxy.metrics_port}/metrics
  units (nginx, app server) {units}
  Redis (rate limits)       {cluster.redis.url}
  PostgreSQL (primary first, then its synchronous standby) {nodes}
  the app servers' DATABASE_URL, which follows the primary:
    {database.url}
  logs                      {cluster.work_dir}, {database.work_dir}

  Issue an API token (printed once; the database is thrown away when the cluster stops):
    DJANGO_DEBUG=1 DATABASE_URL='{database.url}' \\
      {sys.executable} manage.py token issue my-client
  The formation's state, and a planned switchover:
    {shutil.which("pg_autoctl")} show state --monitor '{database.monitor_url}'
    {sys.executable} -m deploy.switchover {shlex.join(database.switchover_arguments())}
  deploy/standby_guard.py runs beside the monitor (its log: {database.guard.log_path}).
  Both nodes archive into one pgBackRest repository ({database.repository}); the backups and the WAL
  there, then a backup on the primary's host (node1's configuration while node1 is the primary):
    {as_postgres}env PGBACKREST_CONFIG={database.nodes[0].pgbackrest_config} pgbackrest --stanza=plantstore info
    {as_postgres}env PGBACKREST_CONFIG={database.nodes[0].pgbackrest_config} pgbackrest --stanza=plantstore backup

  kill -HUP {os.getpid()} restarts the units one at a time (a new version); Ctrl-C stops everything.""",
        flush=True,
    )


def watch(cluster: Cluster, database: FailoverDatabase, asked: list[str]) -> int:
    """Until asked to stop: restart when asked; say when a server dies (HAProxy routes around a unit,
    pg_auto_failover around a database node)."""
    reported = set()
    while "stop" not in asked:
        time.sleep(0.2)
        if "restart" in asked:
            asked.remove("restart")
            cluster.rolling_restart(say=lambda line: print(line, flush=True))
        for name, server in [
            ("front", cluster.front),
            ("haproxy", cluster.haproxy),
            ("redis", cluster.redis),
        ]:
            if server.process.poll() is not None:
                print(f"{name} exited; stopping the cluster", flush=True)
                return 1
        for unit in cluster.units:
            if not unit.running() and unit.name not in reported:
                reported.add(unit.name)
                print(f"{unit.name} ({unit.url}) exited; HAProxy routes around it", flush=True)
        for node, consequence in [
            *((node, "pg_auto_failover promotes its standby if it was the primary") for node in database.nodes),
            (database.monitor, "the database keeps serving, but cannot fail over until it is back"),
        ]:
            if node.process.poll() is not None and node.name not in reported:
                reported.add(node.name)
                print(f"database {node.name} exited; {consequence}", flush=True)
        if not database.guard.running() and "standby_guard" not in reported:
            reported.add("standby_guard")
            print("the standby guard exited; a stalled standby holds every create until it is back", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
