"""A TCP proxy on loopback that delays every chunk by a fixed one-way time: a database "further away".

This kernel has no netem, so `make bench-stack` puts this in front of PostgreSQL: each chunk is
held `delay` in each direction, so a query's round trip grows by 2 × delay. Run as its own process
(its CPU is measured apart from the servers'):

    python -m bench.delay_proxy --listen 127.0.0.1:PORT --target 127.0.0.1:5432 --one-way-ms 0.05

It reads new one-way delays (ms, one per line) from stdin, and exits when stdin closes (the bench
that started it has stopped or died) or after --max-seconds; it refuses connections beyond
--max-connections. The delay is the same for every chunk, so chunks fall due in the order they
arrived: one queue, and one timerfd armed for its head (asyncio's own timers wait in epoll, whose
timeout is whole milliseconds, too coarse for 0.05 ms).
"""

import argparse
import asyncio
import collections
import ctypes
import os
import sys

CLOCK_MONOTONIC, TFD_NONBLOCK, TFD_CLOEXEC, TFD_TIMER_ABSTIME = 1, 0o4000, 0o2000000, 1
PR_SET_TIMERSLACK = 29
PAUSE_ABOVE_BYTES = 1 << 20  # a direction holding more than this stops reading until it drains
_libc = ctypes.CDLL(None, use_errno=True)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


class _Itimerspec(ctypes.Structure):
    _fields_ = [("it_interval", _Timespec), ("it_value", _Timespec)]


class Direction(asyncio.Protocol):
    """One direction of one connection: what it receives goes out on `peer`'s transport, delayed."""

    def __init__(self, proxy: "DelayProxy", client_side: bool):
        self.proxy, self.client_side = proxy, client_side
        self.transport: asyncio.Transport | None = None
        self.peer: Direction | None = None
        self.held_bytes = 0

    def connection_made(self, transport) -> None:
        self.transport = transport
        if self.client_side:
            # Nothing is read from the client until the server's side is connected.
            transport.pause_reading()
            asyncio.get_running_loop().create_task(self.proxy.connect(self))

    def data_received(self, data: bytes) -> None:
        self.held_bytes += len(data)
        if self.held_bytes > PAUSE_ABOVE_BYTES:
            self.transport.pause_reading()
        self.proxy.hold(self, data)

    def eof_received(self) -> bool:
        self.proxy.hold(self, None)  # the other side is closed once what came before is delivered
        return True

    def deliver(self, data: bytes | None) -> None:
        peer = self.peer.transport
        if data is None:
            peer.close()
            return
        self.held_bytes -= len(data)
        if not peer.is_closing():
            peer.write(data)
        if self.held_bytes <= PAUSE_ABOVE_BYTES and not self.transport.is_closing():
            self.transport.resume_reading()

    def connection_lost(self, exc) -> None:
        if self.client_side:
            self.proxy.open -= 1
        if self.peer and self.peer.transport and not self.peer.transport.is_closing():
            self.peer.transport.close()


class DelayProxy:
    def __init__(self, target: tuple[str, int], one_way: float, max_connections: int):
        self.target, self.one_way, self.max_connections = target, one_way, max_connections
        self.open = 0
        self.loop = asyncio.get_running_loop()
        self.held: collections.deque = collections.deque()  # (due, direction, data), in due order
        self.timer = _libc.timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC)
        if self.timer < 0:
            raise OSError(ctypes.get_errno(), "timerfd_create")
        self.loop.add_reader(self.timer, self.release)

    def hold(self, direction: Direction, data: bytes | None) -> None:
        due = self.loop.time() + self.one_way
        if self.held and due < self.held[-1][0]:
            due = self.held[-1][0]  # the delay was just lowered: keep the order
        self.held.append((due, direction, data))
        if len(self.held) == 1:
            self.arm(due)

    def arm(self, due: float) -> None:
        seconds, fraction = divmod(due, 1)
        spec = _Itimerspec(_Timespec(0, 0), _Timespec(int(seconds), max(1, int(fraction * 1e9))))
        if _libc.timerfd_settime(self.timer, TFD_TIMER_ABSTIME, ctypes.byref(spec), None) < 0:
            raise OSError(ctypes.get_errno(), "timerfd_settime")

    def release(self) -> None:
        try:
            os.read(self.timer, 8)
        except BlockingIOError:
            pass
        now = self.loop.time()
        while self.held and self.held[0][0] <= now:
            _, direction, data = self.held.popleft()
            direction.deliver(data)
        if self.held:
            self.arm(self.held[0][0])

    async def connect(self, client: Direction) -> None:
        self.open += 1
        if self.open > self.max_connections:
            client.transport.close()
            return
        try:
            _, server = await self.loop.create_connection(lambda: Direction(self, False), *self.target)
        except OSError:
            client.transport.close()
            return
        client.peer, server.peer = server, client
        if client.transport.is_closing():
            server.transport.close()
        else:
            client.transport.resume_reading()


async def serve(args: argparse.Namespace) -> None:
    loop = asyncio.get_running_loop()
    proxy = DelayProxy(parse_address(args.target), args.one_way_ms / 1000, args.max_connections)
    host, port = parse_address(args.listen)
    if host not in ("127.0.0.1", "::1", "localhost"):
        raise SystemExit("delay_proxy: listens on loopback only")
    server = await loop.create_server(lambda: Direction(proxy, True), host, port)
    stdin_closed = loop.create_future()
    loop.add_reader(sys.stdin.fileno(), read_control, proxy, stdin_closed)
    print(f"delay_proxy: {args.listen} -> {args.target}, one way {args.one_way_ms} ms", flush=True)
    try:
        await asyncio.wait_for(stdin_closed, timeout=args.max_seconds)
    except TimeoutError:
        pass
    finally:
        server.close()


def read_control(proxy: DelayProxy, stdin_closed: asyncio.Future) -> None:
    data = os.read(sys.stdin.fileno(), 4096)
    if not data:
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        if not stdin_closed.done():
            stdin_closed.set_result(None)
        return
    for line in data.split():
        proxy.one_way = float(line) / 1000
        print(f"delay_proxy: one way {float(line)} ms", flush=True)


def parse_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host, int(port)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", required=True, help="HOST:PORT on loopback")
    parser.add_argument("--target", required=True, help="HOST:PORT of the server")
    parser.add_argument("--one-way-ms", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=3600)
    parser.add_argument("--max-connections", type=int, default=500)
    args = parser.parse_args()
    _libc.prctl(PR_SET_TIMERSLACK, 1000, 0, 0, 0)  # wake within 1 µs of the due time, not 50
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
