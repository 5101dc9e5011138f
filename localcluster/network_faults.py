"""Network faults on loopback, as production meets them: packets to a server dropped, not refused, or delayed.

The tests (tests/faults.py) and `make chaos` (localcluster/chaos/) make them with these.

A forwarder gives a server that listens on a unix socket (the test run's PostgreSQL) a loopback TCP
port; dropped_packets() drops every packet to and from a loopback port with an nftables table of its
own, removed whatever happens. A proxy that merely stops forwarding would not do: its kernel still
acknowledges every byte and answers every keepalive probe, so it makes a hung server, and the TCP
timeouts that free a worker when a cable is pulled would never be put to the test.

A delaying relay holds every byte for a while in each direction, as a slow link does. netem (tc's
network emulator, the usual way) is not in every kernel, this machine's among them ("Specified qdisc
kind is unknown"); a delay, unlike a drop, needs no kernel help to be faithful where it matters: each
statement's answer reaches the client a round trip later.
"""

import queue
import random
import shutil
import socket
import subprocess
import threading
import time
from contextlib import contextmanager

from localcluster.processes import free_port

# How long a forwarder tries to reach its target for one connection: libpq's smallest connect_timeout.
CONNECT_TIMEOUT_S = 2


class Forwarder:
    """Each TCP connection to 127.0.0.1:`port` forwarded, byte for byte, to `target`: a unix
    socket's path, or a (host, port) pair.

    `port` is below the kernel's ephemeral range (free_port()), as every server's here is: a client
    bound to another loopback address (the TLS proxy's, 127.0.0.10) may be given, as its source port,
    a port this one holds at 127.0.0.1, and dropped_packets(port) would then drop that client's
    packets too: a test beside it would see its request unanswered (seen in CI, twice)."""

    def __init__(self, target: str | tuple[str, int]):
        self.target = target
        self.port = free_port()
        self.listener = socket.create_server(("127.0.0.1", self.port))
        self.sockets: list[socket.socket] = []
        self.lock = threading.Lock()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            family = socket.AF_UNIX if isinstance(self.target, str) else socket.AF_INET
            server = socket.socket(family, socket.SOCK_STREAM)
            server.settimeout(CONNECT_TIMEOUT_S)  # a target whose packets vanish holds no later connection long
            try:
                server.connect(self.target)
                server.settimeout(None)
            except OSError:
                client.close()
                server.close()
                continue
            with self.lock:
                self.sockets += [client, server]
            self.relay(client, server)

    def relay(self, client: socket.socket, server: socket.socket) -> None:
        """Carry the bytes of a connection both ways, from threads of its own."""
        for source, destination in ((client, server), (server, client)):
            threading.Thread(target=self.pump, args=(source, destination), daemon=True).start()

    @staticmethod
    def pump(source: socket.socket, destination: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                destination.sendall(data)
        except OSError:
            pass
        for end in (source, destination):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def end_connections(self) -> None:
        """End every connection open now, as a database restart ends them: both ends see it at once."""
        with self.lock:
            sockets, self.sockets = self.sockets, []
        for end in sockets:
            try:
                end.shutdown(socket.SHUT_RDWR)  # wakes its pump: a close alone would not
            except OSError:
                pass
            end.close()

    def close(self) -> None:
        """Stop accepting and end every connection: the server sees its clients leave."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.listener.close()
        self.end_connections()


class DelayingRelay(Forwarder):
    """Each TCP connection to 127.0.0.1:`port` relayed to `target` (as Forwarder's), every chunk of
    bytes held `delay` seconds in each direction, drawn for each chunk uniformly from (low, high) by a
    seeded generator: a round trip gains two draws. The bytes of a connection keep their order (a chunk
    never leaves before the one ahead of it), as on a TCP connection over a slow link. `delay` may be
    changed while connections are open; it applies to the chunks that arrive after.

    It counts the connections it accepted and the round trips made on them: a round trip starts when
    the client sends after the server has answered (or sends first). What it does not delay: the TCP
    handshake and acknowledgements, which its own kernel answers (netem would delay a new connection's
    handshake by one round trip more, and each acknowledgement, well inside libpq's 5 s tcp_user_timeout).
    """

    def __init__(self, target: str | tuple[str, int], delay: tuple[float, float] = (0, 0), seed: int = 45):
        self.delay = delay
        self.random = random.Random(seed)
        self.connections = self.round_trips = 0
        self.queues: list[queue.Queue] = []
        super().__init__(target)  # accepts from here on

    def relay(self, client: socket.socket, server: socket.socket) -> None:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        last_sender = [None]  # of this connection: "client" or "server"
        with self.lock:
            self.connections += 1
        for source, destination, sender in ((client, server, "client"), (server, client, "server")):
            held: queue.Queue = queue.Queue()
            with self.lock:
                self.queues.append(held)
            threading.Thread(target=self.receive, args=(source, held, sender, last_sender), daemon=True).start()
            threading.Thread(target=self.send, args=(held, destination), daemon=True).start()

    def receive(self, source: socket.socket, held: queue.Queue, sender: str, last_sender: list) -> None:
        """Queue each chunk from `source` with the moment it may leave: its delay after its arrival,
        and never before the chunk ahead of it."""
        leaves = 0.0
        try:
            while data := source.recv(65536):
                with self.lock:
                    if sender == "client" and last_sender[0] != "client":
                        self.round_trips += 1
                    last_sender[0] = sender
                    leaves = max(leaves, time.monotonic() + self.random.uniform(*self.delay))
                held.put((leaves, data))
        except OSError:
            pass
        held.put(None)  # the end: after every chunk already held

    @staticmethod
    def send(held: queue.Queue, destination: socket.socket) -> None:
        try:
            while (chunk := held.get()) is not None:
                leaves, data = chunk
                time.sleep(max(0.0, leaves - time.monotonic()))
                destination.sendall(data)
            destination.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def counts(self) -> tuple[int, int]:
        """(connections accepted, round trips made) so far."""
        with self.lock:
            return self.connections, self.round_trips

    def end_connections(self) -> None:
        with self.lock:
            queues, self.queues = self.queues, []
        for held in queues:
            held.put(None)  # wakes its sender
        super().end_connections()  # and its receiver


@contextmanager
def dropped_packets(*ports: int, address: str | None = None, table: str | None = None, owner: int | None = None):
    """Every TCP packet to or from any of `ports`, at `address` or at every loopback address, dropped
    while the block runs (established connections stay open, new ones are never answered); the
    nftables table (`table`, else named for the first port) is deleted after it, whatever happens.
    With `owner` (a user id), only the packets sent to the ports by that user's sockets: one link cut
    where others share the address and port (what the server sends back is not told apart, and passes)."""
    nft = shutil.which("nft")
    if nft is None:
        raise RuntimeError("nft is not installed (Debian package nftables)")
    table = table or f"plantstore_test_drop_{ports[0]}"
    listed = ", ".join(str(port) for port in ports)
    to, source = (f"ip daddr {address} ", f"ip saddr {address} ") if address else ("", "")
    sent = f"{to}tcp dport {{ {listed} }} drop"
    back = f"{source}tcp sport {{ {listed} }} drop"
    if owner is not None:
        sent, back = f"{to}tcp dport {{ {listed} }} meta skuid {owner} drop", ""
    rules = f"""table ip {table} {{
        chain output {{
            type filter hook output priority 0; policy accept;
            {sent}
            {back}
        }}
    }}"""
    added = subprocess.run([nft, "-f", "-"], input=rules, text=True, capture_output=True, timeout=10)
    if added.returncode:
        raise RuntimeError(f"nft could not add the table: {added.stderr}")
    try:
        yield
    finally:
        subprocess.run([nft, "delete", "table", "ip", table], check=True, capture_output=True, timeout=10)
