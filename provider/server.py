"""Run the provider as its own long-lived process."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import os
import signal
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, cast

import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
from uvicorn.protocols.utils import get_client_addr

from labcore.answers import REPLAYED
from labcore.bus import Bus
from labcore.collector import uncollected
from labcore.keys import RunKeys
from labcore.prctl import die_with_parent
from provider.buses import RunBuses
from provider.fast import METHODS, Fast, Held, answering
from provider.gate import Gate, GateMiddleware
from provider.holds import Holds
from provider.ledger import Answer
from provider.store import Store
from provider.wire import MAX_BODY

_FAILED = Answer(500, {"error": "internal server error"})


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
    with uncollected():  # the store and the answers live as long as the provider
        store = Store(db)
        connect = functools.partial(_bus, bus_url, bus_prefix) if bus_url else None
        gate = Gate()
        holds = Holds(connect, gate)
        app = _LazyApp(functools.partial(_make_app, store, holds, gate, token))
        protocol = functools.partial(_Protocol, fast=answering(store, holds, gate, token))
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
        http=protocol,
        ws="none",  # no route takes one: every connection is an HTTP one of _Protocol
        lifespan="off",  # the app has no startup or shutdown of its own, and is made later
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


def _make_app(store: Store, holds: Holds, gate: Gate, token: str | None) -> Any:
    """The app for every request the protocol does not answer: FastAPI's import with it."""
    with uncollected():
        from provider.app import create_app

        return GateMiddleware(create_app(store, holds, token), gate)


class _LazyApp:
    """The provider's ASGI app, made by the first request that needs it (`provider.fast` says
    which do not). Its framework's import and its routes are a quarter of a second of CPU,
    most of a provider's start, and a default run never needs them."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self._make = make
        self._app: Any = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if self._app is None:
            self._app = self._make()
        await self._app(scope, receive, send)


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
        tasks = self.server_state.tasks
        return any(not task.done() for task in tasks) or any(c.in_progress for c in self.server_state.connections)


class _Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with a run's requests answered in it, an answer
    written whole, and Nagle off on TCP.

    Nearly every request of a run is answered here as soon as its body is whole
    (`provider.fast`), without the task, the ASGI messages, the middleware and
    the response object uvicorn and the framework make for every request: for
    the unarmed send, a fifth of the provider's instructions (529,336 before,
    424,379 after: bench/provider_instructions.py); and the framework is not
    even imported (`_LazyApp`). An armed send's answer is made in a thread of
    its own, which holds it at its boundaries, and written here once made; the
    connection reads nothing more meanwhile. A request that is not taken here
    goes on to the app as uvicorn would have handed it over, and one pipelined
    behind a request of the app's waits its turn there.

    uvicorn writes an answer's head and its body apart: two system calls, each
    of which can wake a client waiting for the answer. The transport here hands
    the kernel what was written in one turn of the event loop as one write.

    asyncio turns Nagle off only for a socket made with IPPROTO_TCP named, and
    uvicorn's (and most) are made without: on a keep-alive connection the body
    waited for the client's delayed ACK, 40 ms an answer."""

    def __init__(self, *args: Any, fast: Fast | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fast = fast
        self._body: bytearray | None = None  # a request that may be answered here: its body so far
        self._closing = False  # asked to shut down while such a request was coming in
        self._holding = False  # an armed send's answer is being made in its thread

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().connection_made(_Coalescing(transport, self.loop))  # type: ignore[arg-type]

    @property
    def in_progress(self) -> bool:
        """A request that may be answered here has come in and is not answered yet."""
        return self._body is not None

    def on_message_begin(self) -> None:
        if self._holding:  # the parser's error: uvicorn answers 400 and closes (the held answer is dropped)
            raise _Pipelined("a request pipelined behind an armed send")
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        idle = self.cycle is None or self.cycle.response_complete  # nothing pipelined before it
        if self._fast is not None and idle and self._may_be_answered():
            self._body = bytearray()  # decided once the body is whole
        else:
            super().on_headers_complete()

    def _may_be_answered(self) -> bool:
        """A GET, PUT or POST with nothing uvicorn must act on before its body: no 100-continue, no upgrade."""
        return self.parser.get_method() in METHODS and not self.expect_100_continue and not self.parser.should_upgrade()

    def on_body(self, body: bytes) -> None:
        if self._body is None:
            super().on_body(body)
            return
        self._body += body
        if len(self._body) > MAX_BODY:  # the app's guard refuses it
            self._to_app()

    def on_message_complete(self) -> None:
        if self._body is not None:
            assert self._fast is not None  # a body is kept only for it
            answer = self._fast(self.parser.get_method(), self.url, self.headers, bytes(self._body))
            if isinstance(answer, Held):
                self._hold(answer)
                return
            if answer is not None:
                self._answer(answer)
                return
            self._to_app()
        super().on_message_complete()

    def _to_app(self) -> None:
        """The request as uvicorn would have handed it to the app, with the body so far."""
        body, self._body = self._body, None
        super().on_headers_complete()
        if body:
            super().on_body(bytes(body))

    def _hold(self, held: Held) -> None:
        """An armed send: its answer made in a thread of its own, written once made. The
        connection reads nothing more meanwhile; a request already behind it (no client of
        the lab's sends one) is refused as the parser refuses a malformed one."""
        self._holding = True
        self.flow.pause_reading()
        loop = self.loop

        def run() -> None:
            try:
                answer = held.run()
            except Exception:  # as uvicorn answers a route's error, and logs it
                self.logger.exception("Exception in an armed send")
                answer = _FAILED
            with contextlib.suppress(RuntimeError):  # the loop is closed: the provider stopped meanwhile
                loop.call_soon_threadsafe(self._written, answer, held)

        threading.Thread(target=run, name="armed send", daemon=True).start()

    def _written(self, answer: Answer, held: Held) -> None:
        self._holding = False
        try:
            if self.parser is None or self.transport.is_closing():  # its client went away meanwhile
                self._body = None
            else:
                self._answer(answer)
        finally:
            held.done()

    def _answer(self, answer: Answer) -> None:
        """As the app would have answered it (a JSONResponse through uvicorn), in one write."""
        keep_alive = self.parser.should_keep_alive() and not self._closing
        # Through the coalescing transport, after anything an earlier answer left in it.
        cast(_Coalescing, self.transport).write_now(http_answer(answer, self.server_state.default_headers, keep_alive))
        self._body = None  # only now: a SIGTERM in between would find a request in progress
        if self.access_log:  # the line uvicorn logs for a request it answers
            client = get_client_addr({"client": self.client})  # type: ignore[typeddict-item]
            method, version = self.parser.get_method().decode(), self.parser.get_http_version()
            self.access_logger.info(
                '%s - "%s %s HTTP/%s" %d', client, method, self.url.decode(), version, answer.status
            )
        if not keep_alive:
            self.transport.close()
        self.on_response_complete()

    def shutdown(self) -> None:
        if self._body is None:
            super().shutdown()
        else:  # answered, then closed, as uvicorn lets a request in progress end
            self._closing = True


class _Pipelined(Exception):
    """A request arrived behind an armed send still held."""


# Starlette's JSONResponse's encoding, with one encoder (json.dumps with options makes one each call).
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def http_answer(answer: Answer, default_headers: list[tuple[bytes, bytes]], keep_alive: bool) -> bytes:
    """The bytes uvicorn writes for the app's JSONResponse of this answer."""
    body = _ENCODE(answer.body).encode()
    head = [STATUS_LINE[answer.status], _header_lines(default_headers)]
    if answer.replayed:
        head.append(_REPLAYED_LINE)
    head.append(b"content-length: %d\r\ncontent-type: application/json\r\n" % len(body))
    if not keep_alive:
        head.append(b"connection: close\r\n")
    return b"".join([*head, b"\r\n", body])


_REPLAYED_LINE = b"%s: true\r\n" % REPLAYED.lower().encode()
_lines: tuple[list[tuple[bytes, bytes]], bytes] = ([], b"")


def _header_lines(headers: list[tuple[bytes, bytes]]) -> bytes:
    """uvicorn's default headers as lines: made again only when uvicorn replaces the list (its
    date, once a second)."""
    global _lines
    if headers is not _lines[0]:
        _lines = (headers, b"".join(b"%s: %s\r\n" % header for header in headers))
    return _lines[1]


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
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def write_now(self, data: bytes) -> None:
        """What was written so far, and `data` after it, to the socket now."""
        self._pending.append(data)
        self.flush()

    def flush(self) -> None:
        """What was written so far, to the socket now."""
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            if not self._transport.is_closing():  # the client went away within the turn: nobody to read it
                self._transport.write(data)

    def close(self) -> None:
        self.flush()
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
