"""Run the provider as its own long-lived process: its sockets, its event loop, its signals.

Every request, on every socket, is answered by the one service (`provider.service`)
through the connections' HTTP (`provider.connection`), on uvloop where it is
installed: less of the provider's CPU per request than asyncio's own loop.

A SIGTERM with no request in progress ends the process at once, by the signal,
once the store is closed: there is nothing to wait for, and a run's end waits for
its provider. With requests in progress (a held one included), or on SIGINT, or
in a process that handles SIGTERM itself (`testbed provider`), the server stops
accepting, lets those requests be answered for at most a second (one held at a
boundary waits for a controller that, at a run's end, is gone), then raises the
signal again under the handler the process had before.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import resource
import signal
import socket
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from labcore.bus import Bus
from labcore.collector import uncollected
from labcore.endpoints import unix_socket
from labcore.keys import RunKeys
from labcore.prctl import die_with_parent
from provider.buses import RunBuses
from provider.connection import Budget, Connection, Connections
from provider.gate import Gate
from provider.holds import Holds
from provider.limits import BACKLOG
from provider.service import Service
from provider.store import Store

GRACE = 1.0  # seconds a stopping server waits for the requests in progress


def serve(
    port: int,
    db: Path,
    host: str = "127.0.0.1",
    bus_url: str | None = None,
    bus_prefix: str | None = None,
    parent_pid: int | None = None,
    token: str | None = None,
    sockets: Sequence[socket.socket] = (),
    access_log: bool = False,
    uds: Path | None = None,
    announce: str | None = None,
    mail: socket.socket | None = None,
) -> None:
    """`bus_url` (with the Redis password) and `token` come from the caller's
    environment, never from a command line: see labcore.credentials. With
    `sockets`, serve on those bound sockets instead of `host`:`port` (the caller
    chose and named the port, or holds them across the provider's restarts).
    With `uds`, serve on that unix socket too (the same service, the same token):
    the lab's own work-horses on this host connect there, without a TCP connect per job.
    With `announce` (the command's name), say on stderr where it serves, once bound.
    With `mail`, relay SMTP on that bound socket too, to a run's smtp:// destination (`provider.mail`)."""
    die_with_parent(parent_pid)
    with uncollected():  # the store and the service live as long as the provider
        store = Store(db)
        connect = functools.partial(_bus, bus_url, bus_prefix) if bus_url else None
        gate = Gate()
        service = Service(store, Holds(connect, gate), gate, token)
    listening = list(sockets) or [_tcp_socket(host, port)]
    if uds is not None:
        listening.append(unix_socket(uds))
    if announce is not None:
        where = " and ".join(_address(sock) for sock in listening)
        print(f"{announce}: serving {where} (log {db})", file=sys.stderr)

    def close() -> None:
        service.close()
        if uds is not None:
            with contextlib.suppress(FileNotFoundError):
                uds.unlink()

    try:
        Server(service, listening, close, access_log, gate, mail).run()
    finally:
        close()


def _bus(url: str, prefix: str | None) -> Bus | RunBuses:
    """Called by the first armed request (provider.holds): redis-py is imported then."""
    from labcore import connections

    redis = connections.from_url(url)
    # Without a prefix the provider serves any run on that Redis: each armed request names its run.
    return Bus(redis, RunKeys(prefix)) if prefix else RunBuses(redis)


class Server:
    def __init__(
        self,
        service: Service,
        sockets: list[socket.socket],
        close: Callable[[], None],
        access_log: bool = False,
        gate: Gate | None = None,
        mail: socket.socket | None = None,
    ) -> None:
        """`close`: what a SIGTERM that ends the process at once does first. `gate`: while
        it is closed, no new connection is accepted (`provider.gate`). `mail`: the SMTP relay's socket."""
        self._service = service
        self._mail = mail
        self._sockets = sockets
        self._gate = gate
        # Each server listens on a copy of its socket, so that it can stop accepting
        # (asyncio closes a server's socket) and start again on a fresh copy.
        self._servers: list[asyncio.AbstractServer] | None = None
        self._close = close
        self._access = _access_logger() if access_log else None
        self._connections: Connections | None = None  # once serving
        self._stop = asyncio.Event()
        self._signals: list[int] = []  # received, to raise again once stopped
        self._dies_by_sigterm = False
        self._forced = False  # a second signal: stop without waiting
        self._ticker: asyncio.TimerHandle | None = None

    def run(self) -> None:
        """Serve until a signal says stop."""
        loop = _event_loop()
        previous: dict[signal.Signals, Callable[[int, FrameType | None], Any] | int | None] = {}
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                previous[sig] = signal.getsignal(sig)
                loop.add_signal_handler(sig, self._on_signal, sig)
            self._dies_by_sigterm = previous[signal.SIGTERM] == signal.SIG_DFL
        try:
            loop.run_until_complete(self._serve(loop))
        finally:
            for sig, handler in previous.items():
                loop.remove_signal_handler(sig)
                if handler is not None:  # None: not one Python set
                    signal.signal(sig, handler)
            loop.close()
        self._close()
        for received in reversed(self._signals):  # as the process would have had them, with nothing left to do
            signal.raise_signal(received)

    def in_progress(self) -> bool:
        return self._connections is not None and self._connections.in_progress()

    def _on_signal(self, sig: int) -> None:
        """On the event loop, between two of its callbacks: no request is inside the service."""
        self._signals.append(sig)
        if sig == signal.SIGTERM and self._dies_by_sigterm and self._connections is not None and not self.in_progress():
            self._close()
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)
        self._forced = self._stop.is_set()
        self._stop.set()

    def _tick(self, loop: asyncio.AbstractEventLoop, connections: Connections) -> None:
        """Once a second, from the first: the Date header, and the idle connections closed."""
        connections.tick()
        self._ticker = loop.call_later(1, self._tick, loop, connections)

    async def _accept(self, loop: asyncio.AbstractEventLoop, connections: Connections) -> None:
        if self._servers is not None:
            return
        self._servers = servers = []
        for sock in self._sockets:
            if sock.family == socket.AF_UNIX:
                servers.append(await loop.create_unix_server(connections, sock=sock.dup(), backlog=BACKLOG))
            else:
                servers.append(await loop.create_server(connections, sock=sock.dup(), backlog=BACKLOG))
        if self._servers is not servers:  # told to stop meanwhile
            for server in servers:
                server.close()

    def _shut(self, connections: Connections) -> list[Connection]:
        """The doors shut before a planned crash (`provider.gate`): no connection accepted,
        the open ones closed once idle. Those with a request coming in, to be answered first."""
        self._stop_accepting()
        return [c for c in list(connections.open) if c.drain()]

    def _stop_accepting(self) -> None:
        for server in self._servers or ():
            server.close()
        self._servers = None

    async def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        connections = Connections(self._service, loop, self._access, Budget.of(_descriptors()))
        await self._accept(loop, connections)
        if self._gate is not None:

            def close() -> Callable[[], bool]:
                shut: concurrent.futures.Future[list[Connection]] = concurrent.futures.Future()
                loop.call_soon_threadsafe(lambda: shut.set_result(self._shut(connections)))
                try:
                    waited = shut.result(timeout=GRACE)
                except concurrent.futures.TimeoutError:  # the loop is stuck: nothing to wait for
                    return lambda: False
                return lambda: any(c.answering for c in waited)

            def reopen() -> None:
                asyncio.run_coroutine_threadsafe(self._accept(loop, connections), loop)

            self._gate.also(close, reopen)
        self._connections = connections
        self._ticker = loop.call_later(1, self._tick, loop, connections)
        relay = None
        if self._mail is not None:
            from provider import mail  # smtplib and the SMTP wire: only for a run that relays mail

            relay = await mail.serve(self._mail, self._service)
        try:
            await self._stop.wait()
        finally:
            self._ticker.cancel()
            if relay is not None:
                relay.close()
            self._stop_accepting()
            connections.shutdown()
            deadline = loop.time() + GRACE
            while connections.in_progress() and not self._forced and loop.time() < deadline:
                await asyncio.sleep(0.01)
            connections.close()


def _event_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:  # not built for this platform
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _descriptors() -> int:
    """The process's limit on open descriptors, first raised to the most it may be: each
    connection takes one (`provider.connection.Budget` shares them out)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    return soft if soft != resource.RLIM_INFINITY else 1 << 20


def _access_logger() -> logging.Logger:
    """A line on stdout for every answer."""
    logger = logging.getLogger("provider.access")
    if not logger.handlers:
        logger.addHandler(logging.StreamHandler(sys.stdout))
    logger.setLevel(logging.INFO)
    logger.propagate = False
    return logger


def _address(sock: socket.socket) -> str:
    """Where a listening socket is reached: its URL, or a unix socket's path."""
    if sock.family == socket.AF_UNIX:
        return str(sock.getsockname())
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _tcp_socket(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock
