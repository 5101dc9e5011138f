"""make cluster's topology as `make chaos` runs it: the failover pair, the cluster in front, and a relay per node.

The app servers reach each database node through a relay of its own (localcluster/network_faults.py's
DelayingRelay, passing bytes on at once until the slow-database fault delays them), at the address
APP_ADDRESS; the nodes, the monitor and deploy/standby_guard.py reach the nodes at PEER_ADDRESS. So a
fault can cut the primary off from the app servers alone, or from its standby alone. The relay's own
kernel acknowledges what the app servers send, so a fault that cuts the app servers off also drops
the relay's port: their TCP timeouts see the fault as they would without it.
"""

import os
import pwd
import secrets
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg

from deploy.processes import ROOT
from localcluster.__main__ import prepare_database
from localcluster.cluster import Cluster
from localcluster.database import ADDRESSES, DataNode, FailoverDatabase
from localcluster.network_faults import DelayingRelay

PEER_ADDRESS, APP_ADDRESS = ADDRESSES
# The Host the clients name: one make cluster allows.
HOST = "127.0.0.1"


class Topology:
    """The database (two nodes and the monitor), a relay per node, and the cluster (the front, HAProxy,
    `app_servers` units, Redis), its settings make cluster's, each token limited to `throttle_rate`."""

    def __init__(self, work_dir: Path, throttle_rate: str, app_servers: int = 2, supervised: bool = False):
        self.work_dir, self.app_servers, self.supervised = work_dir, app_servers, supervised
        self.database = FailoverDatabase(supervised=supervised)
        self.relays: list[DelayingRelay] = []
        self.cluster: Cluster | None = None
        self.env = {
            "DJANGO_SETTINGS_MODULE": "plantstore_site.settings",
            "DJANGO_DEBUG": "0",
            "DJANGO_SECRET_KEY": secrets.token_urlsafe(50),
            "DJANGO_ALLOWED_HOSTS": "127.0.0.1,localhost",
            "DJANGO_STATIC_ROOT": str(work_dir / "static"),
            "PLANTS_THROTTLE_RATE": throttle_rate,
        }
        self.peer_address, self.app_address = PEER_ADDRESS, APP_ADDRESS
        # The threads the faults start and heal from, alive until stop(): a supervised server gets its
        # parent's death signal when the thread that started it ends (PR_SET_PDEATHSIG is the thread's),
        # so a server a fault's own thread restarted would stop when that thread did.
        self.launcher = ThreadPoolExecutor(max_workers=8, thread_name_prefix="chaos-launcher")
        # The database servers' user, whose sockets alone a cut between the nodes drops (None: everyone's).
        self.database_user_id = pwd.getpwnam("postgres").pw_uid if os.geteuid() == 0 else None

    def start(self) -> "Topology":
        try:
            self.database.start()
            prepare_database({**os.environ, **self.env, "DATABASE_URL": self.database.url})
            self.relays = [DelayingRelay((APP_ADDRESS, node.port), seed=node.port) for node in self.database.nodes]
            ports = ",".join(str(relay.port) for relay in self.relays)
            hosts = ",".join("127.0.0.1" for _ in self.relays)
            url = (
                f"postgres://postgres@/{self.database.database}?host={hosts}&port={ports}"
                "&target_session_attrs=read-write&connect_timeout=2"
            )
            self.cluster = Cluster(
                None, self.work_dir, app_servers=self.app_servers, supervised=self.supervised, database_url=url,
                **self.env,
            )  # fmt: skip
            self.cluster.start()
        except BaseException:
            self.stop()
            raise
        return self

    def call(self, action):
        """`action()` run on one of the launcher's threads, which outlive every server it starts; its result."""
        return self.launcher.submit(action).result()

    def relay_for(self, node: DataNode) -> DelayingRelay:
        return self.relays[self.database.nodes.index(node)]

    def issue_token(self, name: str) -> str:
        env = {**os.environ, **self.env, "DATABASE_URL": self.database.url}
        command = [sys.executable, "manage.py", "token", "issue", name]
        return subprocess.run(command, cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip()

    def converged(self) -> bool:
        """A primary and its synchronous standby, the standby guard, Redis, and every unit running and UP in HAProxy."""
        try:
            stats = self.cluster.haproxy.server_stats()
            units_up = all(
                unit.running() and stat["status"] == "UP" for unit, stat in zip(self.cluster.units, stats, strict=True)
            )
            return (
                units_up and self.cluster.redis.answers() and self.database.guard.running() and self.database.healthy()
            )
        except (OSError, RuntimeError):
            return False

    def state(self) -> dict:
        """What converged() looks at, for a run that did not converge: each node's states, each unit's."""
        state = {"redis answers": self.cluster.redis.answers(), "standby guard running": self.database.guard.running()}
        try:
            state["database"] = self.database.states()
        except psycopg.Error as error:
            state["database"] = repr(error)
        try:
            statuses = [stat["status"] for stat in self.cluster.haproxy.server_stats()]
        except (OSError, RuntimeError) as error:
            statuses = [repr(error)] * len(self.cluster.units)
        for unit, status in zip(self.cluster.units, statuses, strict=True):
            state[unit.name] = f"running: {unit.running()}, in HAProxy: {status}"
        return state

    def save_logs(self, folder: Path) -> None:
        """Every server's log (the units', HAProxy's, the front's, each node's, the guard's) into `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        for work_dir in (self.work_dir, self.database.work_dir):
            for log in work_dir.glob("*.log"):
                shutil.copy(log, folder / log.name)

    def rows(self) -> dict[int, dict]:
        """Every plant stored, as the primary has it: {id: the body that created it}."""
        rows = FailoverDatabase.execute(self.database.primary(), "SELECT id, name, tag FROM plants_plant")
        return {
            plant_id: {"id": plant_id, "name": name, **({"tag": tag} if tag else {})} for plant_id, name, tag in rows
        }

    def stop(self) -> None:
        for relay in self.relays:
            relay.close()
        if self.cluster:
            self.cluster.stop()
        self.database.stop()
        self.launcher.shutdown()
