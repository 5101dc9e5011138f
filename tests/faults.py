"""Network faults on loopback, as production meets them: packets to a server dropped, not refused.

A forwarder gives a server that listens on a unix socket (the test run's PostgreSQL) a loopback TCP
port; dropped_packets() drops every packet to and from a loopback port with an nftables table of its
own, removed whatever happens. A proxy that merely stops forwarding would not do: its kernel still
acknowledges every byte and answers every keepalive probe, so it makes a hung server, and the TCP
timeouts that free a worker when a cable is pulled would never be put to the test.
"""

import shutil
import socket
import subprocess
import threading
from contextlib import contextmanager


class Forwarder:
    """Each TCP connection to 127.0.0.1:`port` forwarded, byte for byte, to `target`: a unix
    socket's path, or a (host, port) pair."""

    def __init__(self, target: str | tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
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
            try:
                server.connect(self.target)
            except OSError:
                client.close()
                server.close()
                continue
            with self.lock:
                self.sockets += [client, server]
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

    def close(self) -> None:
        """Close every connection: the server sees its clients leave."""
        try:
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for end in self.sockets:
                try:
                    end.shutdown(socket.SHUT_RDWR)  # wakes its pump: a close alone would not
                except OSError:
                    pass
                end.close()


def unix_socket_or_address(settings_dict: dict) -> str | tuple[str, int]:
    """Where PostgreSQL of Django's `settings_dict` listens: its unix socket, or its TCP address."""
    host, port = settings_dict["HOST"] or "/var/run/postgresql", int(settings_dict["PORT"] or 5432)
    return f"{host}/.s.PGSQL.{port}" if host.startswith("/") else (host, port)


@contextmanager
def dropped_packets(port: int):
    """Every TCP packet to or from 127.0.0.1:`port` dropped while the block runs (established
    connections stay open, new ones are never answered); the nftables table is deleted after it,
    whatever happens."""
    nft = shutil.which("nft")
    if nft is None:
        raise RuntimeError("nft is not installed (Debian package nftables)")
    table = f"plantstore_test_drop_{port}"
    rules = f"""table ip {table} {{
        chain output {{
            type filter hook output priority 0; policy accept;
            ip daddr 127.0.0.1 tcp dport {port} drop
            ip saddr 127.0.0.1 tcp sport {port} drop
        }}
    }}"""
    added = subprocess.run([nft, "-f", "-"], input=rules, text=True, capture_output=True, timeout=10)
    if added.returncode:
        raise RuntimeError(f"nft could not add the table: {added.stderr}")
    try:
        yield
    finally:
        subprocess.run([nft, "delete", "table", "ip", table], check=True, capture_output=True, timeout=10)
