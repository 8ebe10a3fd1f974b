"""Run the provider as its own long-lived process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import socket
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from labcore.bus import Bus
from labcore.keys import RunKeys
from labcore.procs import die_with_parent
from provider.app import create_app
from provider.buses import RunBuses
from provider.gate import Gate, GateMiddleware
from provider.holds import Holds
from provider.store import Store


def serve(
    port: int,
    db: Path,
    host: str = "127.0.0.1",
    bus_url: str | None = None,
    bus_prefix: str | None = None,
    parent_pid: int | None = None,
    token: str | None = None,
    sock: socket.socket | None = None,
    access_log: bool = False,
    uds: Path | None = None,
) -> None:
    """`bus_url` (with the Redis password) and `token` come from the caller's
    environment, never from a command line: see labcore.credentials. With
    `sock`, serve on that bound socket (the caller chose and named the port).
    With `uds`, serve on that unix socket too (same app, same token): the lab's
    own work-horses on this host connect there, without a TCP connect per job."""
    die_with_parent(parent_pid)
    store = Store(db)
    connect = functools.partial(_bus, bus_url, bus_prefix) if bus_url else None
    gate = Gate()
    app = GateMiddleware(create_app(store, Holds(connect, gate), token), gate)
    level = "info" if access_log else "warning"
    # uvicorn's "auto" loop is uvloop, a dependency: a quarter less CPU per request than asyncio's.
    # A SIGTERM waits at most a second for requests in progress: one held at a boundary
    # waits for a controller that, at a run's end, is gone, and would keep the provider
    # up until the run's grace ran out and a SIGKILL followed (5 s of every such run).
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=level,
        access_log=access_log,
        http=_Protocol,
        timeout_graceful_shutdown=1,
    )
    sockets = None
    if uds is not None:
        sockets = [sock if sock is not None else config.bind_socket(), _unix_socket(uds)]
    elif sock is not None:
        sockets = [sock]

    def close() -> None:
        store.close()
        if uds is not None:
            with contextlib.suppress(FileNotFoundError):
                uds.unlink()

    try:
        _Server(config, close).run(sockets=sockets)
    finally:
        close()


def _bus(url: str, prefix: str | None) -> Bus | RunBuses:
    """Called by the first armed request (provider.holds): redis-py is imported then."""
    from labcore import connections

    redis = connections.from_url(url)
    # Without a prefix the provider serves any run on that Redis: each armed request names its run.
    return Bus(redis, RunKeys(prefix)) if prefix else RunBuses(redis)


class _Server(uvicorn.Server):
    """uvicorn's server, ended by a SIGTERM at once when no request is in progress.

    uvicorn's graceful shutdown polls: up to 0.1 s before it sees the signal, then
    a fixed 0.1 s for connections to close; then it raises the signal again, under
    the handler the process had before. Where that is the default, the process dies
    there, and with nothing in progress there was nothing to wait for (a connection
    between requests is only closed): those 0.15 to 0.2 s were the end of every
    run. A request in progress, a held one included, still gets the graceful
    shutdown, and so does a process that goes on after serving (`testbed provider`)."""

    def __init__(self, config: uvicorn.Config, close: Callable[[], None]) -> None:
        super().__init__(config)
        self._close = close
        self._dies_by_sigterm = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # A signal handler runs between two bytecodes of the main thread, which serves
        # every request: with no request task, no request is inside the store.
        if sig == signal.SIGTERM and self._dies_by_sigterm and self.started and not self._in_progress():
            self._close()
            signal.signal(sig, signal.SIG_DFL)
            signal.raise_signal(sig)
        super().handle_exit(sig, frame)

    def _in_progress(self) -> bool:
        """A request's task leaves uvicorn's set by a done callback, queued behind the
        write of its answer: a client woken by that write can stop us before it runs."""
        return any(not task.done() for task in self.server_state.tasks)


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with an answer written whole and Nagle off on TCP.

    uvicorn writes an answer's head and its body apart: two system calls, each
    of which can wake a client waiting for the answer. The transport here hands
    the kernel what was written in one turn of the event loop as one write.

    asyncio turns Nagle off only for a socket made with IPPROTO_TCP named, and
    uvicorn's (and most) are made without: on a keep-alive connection the body
    waited for the client's delayed ACK, 40 ms an answer."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(_Coalescing(transport, self.loop))  # type: ignore[arg-type]


class _Coalescing:
    """A transport whose writes in one turn of the event loop reach the socket as one.

    Anything that could go out after those writes (a close, the end of the turn)
    sends them first; everything else is the transport's own."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        # What uvicorn asks of a transport on every connection and request, bound once to the
        # transport's own: no Python call between uvicorn and the event loop's C code.
        self.get_extra_info = transport.get_extra_info
        self.is_closing = transport.is_closing
        self.pause_reading = transport.pause_reading
        self.resume_reading = transport.resume_reading

    def write(self, data: bytes) -> None:
        if not self._pending:
            self._loop.call_soon(self._flush)
        self._pending.append(data)

    def _flush(self) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():  # the client went away within the turn: nobody to read it
                self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


def _unix_socket(path: Path) -> socket.socket:
    """Bound beside the path, then renamed over it: a restarted provider replaces
    its predecessor's socket with no moment at which the path is missing."""
    fresh = path.with_name(f"{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        fresh.unlink()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(fresh))
    os.chmod(fresh, 0o600)
    os.replace(fresh, path)
    return sock
