"""The faults make cluster's topology can meet, each made as production meets it and healed by the nemesis.

Each kind starts its fault (start() returns what it hit) and heals it (heal()); make cluster restarts
nothing by itself, so what a fault killed or stopped, heal() starts again. Faults belong to a layer
(the database, the database's link as the app servers see it, the app servers, Redis): the nemesis
never runs two of one layer at once, so faults overlap only across layers.
"""

import os
import signal
from contextlib import ExitStack

from localcluster.network_faults import dropped_packets
from localcluster.processes import command_line, descendants


class Fault:
    """One fault on `topology` (localcluster/chaos/topology.py); `choice`, a draw in [0, 1), picks what
    the kind leaves open (which app server, how slow)."""

    layer = "database"
    lasts = (10.0, 30.0)  # seconds from start to heal, drawn; (0, 0): an operation that ends by itself
    settles = 20.0  # seconds after the heal before the layer's next fault may be drawn

    def __init__(self, topology, choice: float):
        self.topology, self.choice = topology, choice
        self.database, self.cluster = topology.database, topology.cluster

    def start(self) -> str:
        raise NotImplementedError

    def heal(self) -> None:
        pass


class PrimaryKilled(Fault):
    """The primary's host lost: its keeper and PostgreSQL killed at once; healed by starting it again
    (it rejoins as the standby once the monitor has promoted the other)."""

    def start(self) -> str:
        self.node = self.database.primary()
        self.node.kill()
        return self.node.name

    def heal(self) -> None:
        self.node.start()


class Partition(Fault):
    """Packets dropped (nftables) while the fault lasts; each subclass says which."""

    lasts = (10.0, 25.0)

    def start(self) -> str:
        self.node = self.database.primary()
        with ExitStack() as tables:  # a table that cannot be added removes those added before it
            for number, (ports, address, owner) in enumerate(self.cut(self.node)):
                table = f"plantstore_chaos_{self.layer}_{number}"
                tables.enter_context(dropped_packets(*ports, address=address, table=table, owner=owner))
            self.tables = tables.pop_all()
        return self.node.name

    def cut(self, node) -> list[tuple[list[int], str | None, int | None]]:
        """What dropped_packets() drops: (ports, at that address or every one, sent by that user's sockets or anyone's)."""
        raise NotImplementedError

    def heal(self) -> None:
        self.tables.close()


class PrimaryCutOffFromStandby(Partition):
    """What the database's servers send to the primary's port at the address the standby replicates
    from: the standby's replication stalls (the monitor's checks of the primary are cut too, being
    theirs), while the keepers report to the monitor and deploy/standby_guard.py, a process of the
    monitor's host, reaches both nodes."""

    def cut(self, node):
        return [([node.port], self.topology.peer_address, self.topology.database_user_id)]


class PrimaryCutOffFromAppServers(Partition):
    """The primary's port at the address the app servers reach it at, and the app servers' side of its relay."""

    def cut(self, node):
        return [([node.port], self.topology.app_address, None), ([self.topology.relay_for(node).port], None, None)]


class PrimaryCutOffFromEveryone(Partition):
    """The primary's host cut off: its port at every address, its relay, and its keeper's link to the monitor."""

    def cut(self, node):
        return [
            ([node.port, self.topology.relay_for(node).port], None, None),
            ([self.database.monitor.port], node.monitor_address, None),
        ]


class Switchover(Fault):
    """A planned switchover as an operator makes one (deploy/switchover.py); it ends by itself."""

    lasts = (0.0, 0.0)
    settles = 25.0

    def start(self) -> str:
        primary = self.database.primary()
        self.database.switchover()
        return primary.name


class StandbyStopped(Fault):
    """The standby stopped cleanly (its keeper and PostgreSQL); healed by starting it again."""

    def start(self) -> str:
        (self.node,) = self.database.standbys()
        self.node.stop()
        return self.node.name

    def heal(self) -> None:
        self.node.start()


class ReplicationStalled(Fault):
    """The standby's walreceiver stopped (SIGSTOP) while its PostgreSQL and keeper answer the monitor:
    deploy/standby_guard.py takes it out of the quorum; healed by SIGCONT."""

    def start(self) -> str:
        (node,) = self.database.standbys()
        (self.pid,) = [pid for pid in descendants(node.process.pid) if b"walreceiver" in command_line(pid)]
        os.kill(self.pid, signal.SIGSTOP)
        return f"{node.name} walreceiver"

    def heal(self) -> None:
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


class SlowDatabase(Fault):
    """Every chunk of bytes between the app servers and the database held up to a few hundred
    milliseconds each way (the relays, localcluster/network_faults.py's DelayingRelay)."""

    layer = "database link"
    settles = 5.0

    def start(self) -> str:
        delay = (0.0, 0.05 + 0.25 * self.choice)
        for relay in self.topology.relays:
            relay.delay = delay
        return f"each chunk held up to {delay[1]:.2f} s"

    def heal(self) -> None:
        for relay in self.topology.relays:
            relay.delay = (0.0, 0.0)


class AppServerKilled(Fault):
    """One production unit's processes killed at once, as its host dying; healed by starting it again."""

    layer = "app servers"
    lasts = (5.0, 20.0)
    settles = 10.0

    def start(self) -> str:
        self.unit = self.cluster.units[int(self.choice * len(self.cluster.units))]
        self.unit.kill()
        return self.unit.name

    def heal(self) -> None:
        self.unit.start()


class RollingRestart(Fault):
    """make cluster's rolling restart (its SIGHUP): each unit drained, restarted, back in rotation."""

    layer = "app servers"
    lasts = (0.0, 0.0)
    # It runs within start(), seconds under load (about 6 s in tests/test_cluster.py's): a minute
    # keeps the layer's next fault clear of it on a slower host.
    settles = 60.0

    def start(self) -> str:
        self.cluster.rolling_restart()
        return "every unit"


class RedisStopped(Fault):
    """Redis stopped (its counts lost: it keeps nothing on disk); healed by starting it again."""

    layer = "redis"
    lasts = (5.0, 20.0)
    settles = 5.0

    def start(self) -> str:
        self.cluster.redis.stop()
        return f"redis {self.cluster.redis.port}"

    def heal(self) -> None:
        self.cluster.redis.start()


FAULTS: dict[str, type[Fault]] = {
    "primary-killed": PrimaryKilled,
    "primary-cut-off-from-standby": PrimaryCutOffFromStandby,
    "primary-cut-off-from-app-servers": PrimaryCutOffFromAppServers,
    "primary-cut-off-from-everyone": PrimaryCutOffFromEveryone,
    "switchover": Switchover,
    "standby-stopped": StandbyStopped,
    "replication-stalled": ReplicationStalled,
    "slow-database": SlowDatabase,
    "app-server-killed": AppServerKilled,
    "rolling-restart": RollingRestart,
    "redis-stopped": RedisStopped,
}
