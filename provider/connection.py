"""HTTP/1.1 on the provider's connections: each request parsed by httptools and handed whole
to the service (`provider.service`), each answer written in one write.

One write per answer, because each write can wake a client waiting for it.
Nagle off on TCP: asyncio turns it off only for a socket made with IPPROTO_TCP
named, and a listening socket's accepted ones are made without; on a keep-alive
connection an answer would otherwise wait for the client's delayed ACK.

A body is read to its end unless it runs past its cap (MAX_BODY; a job's own
request to its destination, MAX_FORWARDED_BODY: `Service.body_cap`), or declares that it
will: then the request is answered from its head alone (413, or 401 without the
token) and the connection closed, so an oversized body is never buffered. An
armed send's answer is made in a thread of its own, which the send holds at its
boundaries, and written once made; the connection reads nothing more meanwhile,
and a request already pipelined behind it (no client of the lab's sends one) is
refused as a malformed request is: 400, and the connection closed.

What a client can hold is bounded (`provider.limits`): a head over its size or
header count is answered 431; the body of a request refused for want of the
token is read but not kept (its 401 waits for it: answered while its body
comes in, the closed connection would be reset, and the 401 maybe lost); a
request not received whole within its
ticks, like a connection idle for its own, is closed; and a client holding its
share of connections has the next answered 503 and closed, as has everyone but
the provider's own user once the descriptors left are the reserve
(`Budget`). Clients are told apart by user where they are on this machine
(`provider.peers`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from http import HTTPStatus
from typing import cast

import httptools

from labcore.answers import REPLAYED
from labcore.scoped import DESTINATION_ROOT
from provider.forward import Passed
from provider.limits import (
    BACKLOG,
    FILES_RESERVE,
    IDLE_TICKS,
    MAX_HEAD,
    MAX_HEADERS,
    OWN_RESERVE,
    PER_CLIENT,
    REQUEST_TICKS,
)
from provider.peers import Client, Peers
from provider.service import (
    BAD_REQUEST,
    HEAD_TOO_LARGE,
    TOO_MANY_CONNECTIONS,
    HeldSend,
    Request,
    Response,
    Service,
)
from provider.wire import MAX_BODY, Fields

_log = logging.getLogger("provider")
_STATUS = {s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in HTTPStatus}
_REPLAYED_LINE = b"%s: true\r\n" % REPLAYED.lower().encode()
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_FORWARDED = f"{DESTINATION_ROOT}/".encode()
# One encoder (json.dumps with options makes one each call); the bytes a JSON answer has always had.
_ENCODE = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode
_DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _encode(response: Response, date: bytes, keep_alive: bool, head_only: bool = False) -> bytes:
    """The answer on the wire: its head (`date`, the Date header's line) and its JSON body."""
    body = _ENCODE(response.body).encode()
    lines = [_STATUS[response.status], date]
    if response.replayed:
        lines.append(_REPLAYED_LINE)
    for header in response.headers:
        lines.append(b"%s: %s\r\n" % header)
    lines.append(b"content-type: application/json\r\ncontent-length: %d\r\n" % len(body))
    if not keep_alive:
        lines.append(b"connection: close\r\n")
    lines.append(b"\r\n")
    if not head_only:  # a HEAD's answer says how long its body would be, without it
        lines.append(body)
    return b"".join(lines)


def _date_line(now: float) -> bytes:
    t = time.gmtime(now)
    day, month = _DAYS[t.tm_wday], _MONTHS[t.tm_mon - 1]
    return b"date: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n" % (
        day.encode(),
        t.tm_mday,
        month.encode(),
        t.tm_year,
        t.tm_hour,
        t.tm_min,
        t.tm_sec,
    )


@dataclass(frozen=True, slots=True)
class Budget:
    """How many connections may be open at once: in all, from all the clients but the provider's
    own user together (`strangers`), and from one of them (`per_client`)."""

    total: int
    strangers: int
    per_client: int = PER_CLIENT

    @classmethod
    def of(cls, descriptors: int) -> Budget:
        """Within `descriptors` (the process's limit). The own user's reserve covers a full backlog
        too: connections one turn of the event loop accepts before it has closed those it refused.
        Under a low limit, the reserve is at most half of what there is."""
        total = max(descriptors - FILES_RESERVE, 2)
        return cls(total, total - min(OWN_RESERVE + BACKLOG, total // 2))

    def admits(self, own: bool, total: int, strangers: int, of_client: int) -> bool:
        """Whether one more connection may open, with these already open (`of_client`: of its client)."""
        if total >= self.total:
            return False
        return own or (strangers < self.strangers and of_client < self.per_client)


class Connections:
    """A server's open connections, and what they share: the service, the event loop,
    the Date header, the ticks that close idle and stalled ones (`tick`, once a second),
    and the count of connections by client that admits each new one (`Budget`)."""

    def __init__(
        self,
        service: Service,
        loop: asyncio.AbstractEventLoop,
        access: logging.Logger | None = None,
        budget: Budget | None = None,
        peers: Peers | None = None,
    ) -> None:
        self.service = service
        self.loop = loop
        self.access = access  # logs a line for every answer, as `testbed provider` shows them
        self.open: set[Connection] = set()
        self.ticks = 0
        self.date = _date_line(time.time())
        self.peers = peers or Peers()
        self._budget = budget or Budget.of(os.sysconf("SC_OPEN_MAX"))
        self._own = os.geteuid()
        self._admitted = 0
        self._strangers = 0
        self._by_client: Counter[Client] = Counter()

    def __call__(self) -> Connection:
        """A new connection's protocol (the factory a server is made with)."""
        return Connection(self)

    def admit(self, client: Client) -> bool:
        own = client == self._own
        if not self._budget.admits(own, self._admitted, self._strangers, self._by_client[client]):
            if own:  # the lab's own links: a failure of the provider's, not a client's excess
                self.service.failures.note(
                    f"the provider refused a connection of its own user: out of descriptors ({self._budget.total})"
                )
            return False
        self._admitted += 1
        if not own:
            self._strangers += 1
            self._by_client[client] += 1
        return True

    def release(self, client: Client) -> None:
        self._admitted -= 1
        if client != self._own:
            self._strangers -= 1
            self._by_client[client] -= 1
            if not self._by_client[client]:
                del self._by_client[client]

    def in_progress(self) -> bool:
        return any(c.in_progress for c in self.open)

    def tick(self) -> None:
        self.ticks += 1
        self.date = _date_line(time.time())
        for connection in list(self.open):
            connection.close_if_idle(self.ticks)

    def shutdown(self) -> None:
        """Each connection closes now, or once its request in progress is answered."""
        for connection in list(self.open):
            connection.shutdown()

    def close(self) -> None:
        for connection in list(self.open):
            connection.close()
        self.peers.close()


class _Refused(Exception):
    """A request the connection will not read: pipelined behind an armed send, or after its close."""


class _HeadTooLarge(Exception):
    """A request head over MAX_HEAD bytes or MAX_HEADERS headers: answered 431, not read on."""


class Connection(asyncio.Protocol):
    def __init__(self, connections: Connections) -> None:
        self._connections = connections
        self._handle = connections.service.handle
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport  # from connection_made, which comes first
        self._client = "-"  # for the access log
        self._admitted: Client | None = None  # whom the connection counts against, once admitted
        # The request coming in.
        self._url = b""
        self._headers = Fields()
        self._cap = MAX_BODY  # of this request's body: more is not read (`Service.body_cap`)
        self._body: list[bytes] = []  # its chunks: joined once, a large body is not copied per chunk
        self._keep_alive = True
        self._cut = False  # answered from its head (its body is over the cap): the rest is not read
        self._kept = True  # its body is kept: not for a request the service refuses from its head
        self._received = 0  # bytes of its body
        self._in_head = False  # its head has begun and is not complete
        self._head_bytes = 0  # of its head, parsed: its line and headers
        self._headers_read = 0
        self._fed = 0  # bytes fed since its head began, while unfinished: what the parser may be keeping of it
        self._began = 0  # the tick its first byte came in
        # The connection.
        self._busy = False  # a request has begun to come in and is not answered yet
        self._holding = False  # an armed send's answer is being made in its thread
        self._write_paused = False  # the client is not reading its answers: nor do we its requests
        self._closing = False  # the server is shutting down: closed once the request in progress is answered
        self._lost = False
        self._idle_since = connections.ticks

    @property
    def in_progress(self) -> bool:
        return self._busy or self._holding

    # -- asyncio's protocol ---------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = self._transport = cast(asyncio.Transport, transport)  # a stream's (uvloop's subclass none)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple):  # TCP's (host, port); a unix socket's peer has no name
            self._client = f"{peer[0]}:{peer[1]}"
        # A transport with no socket (not one a server accepted) counts as the provider's own.
        client = self._connections.peers.client(sock) if sock is not None else os.geteuid()
        if not self._connections.admit(client):
            self._reject(TOO_MANY_CONNECTIONS)
            return
        self._admitted = client
        self._connections.open.add(self)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # A plain request asking for an upgrade is answered as one, and the connection closed
            # (`on_headers_complete`); a CONNECT, or what else the parser leaves unfinished, is refused.
            if self._busy and not self._holding:
                self._reject()
        except httptools.HttpParserError as exc:  # a callback's own exception is its context
            self._reject(HEAD_TOO_LARGE if isinstance(exc.__context__, _HeadTooLarge) else BAD_REQUEST)
        else:
            if self._in_head:  # the parser keeps an unfinished line whole, however long
                self._fed += len(data)
                if self._fed > MAX_HEAD:
                    self._reject(HEAD_TOO_LARGE)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._admitted is not None:
            self._connections.release(self._admitted)
            self._admitted = None
        self._lost = True
        self._busy = False  # what was coming in will not be answered
        if not self._holding:  # else once the held send is settled: it is still in progress
            self._connections.open.discard(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._pause()

    def resume_writing(self) -> None:
        self._write_paused = False
        if not self._holding:
            self._resume()

    # -- httptools' parser --------------------------------------------------------------

    def on_message_begin(self) -> None:
        if self._holding or self._transport.is_closing():
            raise _Refused
        self._busy = True
        self._url = b""
        self._headers = Fields()
        self._body = []
        self._cut = False
        self._kept = True
        self._received = 0
        self._in_head = True
        self._head_bytes = self._headers_read = self._fed = 0
        self._began = self._connections.ticks

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_read(len(url))

    def on_header(self, name: bytes, value: bytes) -> None:
        self._headers_read += 1
        self._head_read(len(name) + len(value))
        # The parser keeps a value's trailing whitespace, which is not part of it (RFC 9110, 5.5).
        self._headers.add(name.lower(), value.rstrip(b" \t"))

    def _head_read(self, size: int) -> None:
        if self._in_head:
            self._head_bytes += size
            if self._head_bytes > MAX_HEAD or self._headers_read > MAX_HEADERS:
                raise _HeadTooLarge

    def on_headers_complete(self) -> None:
        self._in_head = False
        parser = self._parser
        # HTTP/1.1's keep-alive unless it says close (HTTP/1.0's only when it asks for it); an upgrade
        # this server does not speak is answered as a plain request, then the connection closed.
        self._keep_alive = parser.should_keep_alive() and not parser.should_upgrade()
        self._cap = self._body_cap()
        declared = self._headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._cap:
            self._cut_short()
            return
        if declared not in (None, b"0") or b"transfer-encoding" in self._headers:
            self._kept = self._wants_body()
        expect = self._headers.get(b"expect")
        if expect is not None and expect.lower() == b"100-continue" and parser.get_http_version() == "1.1":
            self._write(_CONTINUE)

    def on_body(self, body: bytes) -> None:
        if not self._cut:
            self._received += len(body)
            if self._received > self._cap:
                self._cut_short()
            elif self._kept:
                self._body.append(body)

    def on_message_complete(self) -> None:
        if not self._cut:
            self._respond(oversized=False)

    # -- answering ------------------------------------------------------------------------

    def _body_cap(self) -> int:
        if not self._url.startswith(_FORWARDED):  # the provider's own API: what it ever takes
            return MAX_BODY
        request = self._request(oversized=False)
        return MAX_BODY if request is None else self._connections.service.body_cap(request)

    def _wants_body(self) -> bool:
        request = self._request(oversized=False)
        return request is None or self._connections.service.reads_body(request)

    def _cut_short(self) -> None:
        """The body is over the cap: the request is answered from its head, and the connection closed."""
        self._cut = True
        self._keep_alive = False
        self._body = []
        self._respond(oversized=True)

    def _respond(self, oversized: bool) -> None:
        request = self._request(oversized)
        if request is None:
            self._reject()
            return
        try:
            answer = self._handle(request)
        except Exception as exc:
            _log.exception("Exception answering %s %s", request.method, request.path)
            answer = self._connections.service.failed(exc)
        if isinstance(answer, HeldSend):
            self._hold(answer, request)
        else:
            self._answer(answer, request)

    def _request(self, oversized: bool) -> Request | None:
        """The request as the service takes it; None for a target that is not a path of ASCII."""
        url = self._url
        if url[:1] == b"/" and b"#" not in url:
            path, _, query = url.partition(b"?")
        else:  # the absolute form (a proxy's), or a fragment
            try:
                parsed = httptools.parse_url(url)
            except httptools.HttpParserInvalidURLError:
                return None
            path, query = parsed.path or b"", parsed.query or b""
        try:
            text = path.decode("ascii")
        except UnicodeDecodeError:
            return None
        method = self._parser.get_method().decode("ascii")
        return Request(
            method, text, query.decode("latin-1") if query else "", self._headers, b"".join(self._body), oversized
        )

    def _answer(self, response: Response | Passed, request: Request) -> None:
        # A destination's answer is given back as it gave it; the connection stays as the job's asks.
        close = isinstance(response, Response) and response.close
        keep_alive = self._keep_alive and not close and not self._closing
        transport = self._transport
        if not transport.is_closing():  # else its client went away, or it was closed after an earlier answer
            head_only = request.method == "HEAD"
            if isinstance(response, Passed):
                transport.write(response.encode(keep_alive, head_only))
            else:
                transport.write(_encode(response, self._connections.date, keep_alive, head_only))
        self._busy = False  # only now: a SIGTERM in between would find a request in progress
        self._idle_since = self._connections.ticks
        access = self._connections.access
        if access is not None:
            phrase = response.reason if isinstance(response, Passed) else HTTPStatus(response.status).phrase
            line = f"{request.method} {self._url.decode('latin-1')} HTTP/{self._parser.get_http_version()}"
            access.info('%s - "%s" %d %s', self._client, line, response.status, phrase)
        if not keep_alive:
            self.close()

    def _reject(self, answer: Response = BAD_REQUEST) -> None:
        """Not a request this connection will answer: 400 (or what `answer` says), and the connection closed."""
        self._busy = False
        self._in_head = False
        self._write(_encode(answer, self._connections.date, keep_alive=False))
        self.close()

    def _hold(self, held: HeldSend, request: Request) -> None:
        """An armed send: its answer made in a thread of its own, written once made."""
        self._holding = True
        self._pause()
        loop = self._connections.loop

        def run() -> None:
            response: Response | Passed
            try:
                response = held.run()
            except Exception as exc:
                _log.exception("Exception in an armed send")
                response = self._connections.service.failed(exc)
            with contextlib.suppress(RuntimeError):  # the loop is closed: the provider stopped meanwhile
                loop.call_soon_threadsafe(self._held_answered, response, held, request)

        threading.Thread(target=run, name="armed send", daemon=True).start()

    def _held_answered(self, response: Response | Passed, held: HeldSend, request: Request) -> None:
        self._holding = False
        try:
            if self._closed():  # its client went away meanwhile, or the server closed the connection
                self._busy = False
            else:
                self._answer(response, request)
                if not self._write_paused:
                    self._resume()
        finally:
            held.done()
            if self._lost:
                self._connections.open.discard(self)

    # -- the transport ------------------------------------------------------------------------

    def _closed(self) -> bool:
        return self._transport.is_closing()

    def _write(self, data: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(data)

    def _pause(self) -> None:
        if not self._transport.is_closing():
            self._transport.pause_reading()

    def _resume(self) -> None:
        if not self._transport.is_closing():
            self._transport.resume_reading()

    def close(self) -> None:
        self._transport.close()

    def close_if_idle(self, ticks: int) -> None:
        """Idle for its ticks, or receiving a request for its ticks (an armed send held is neither)."""
        if self._holding:
            return
        if ticks - (self._began if self._busy else self._idle_since) > (REQUEST_TICKS if self._busy else IDLE_TICKS):
            self.close()

    @property
    def answering(self) -> bool:
        """A request of it is still to be answered, the connection still open."""
        return not self._lost and not self._transport.is_closing()

    def drain(self) -> bool:
        """Before a planned crash (`provider.gate`): closed now if no request is coming in, else
        once that one is answered; whether the drain is to wait for it. A request the client
        has sent and the loop not yet read counts as coming: closed unread, it would be reset."""
        if self._lost or self._transport.is_closing():
            return False
        if self._holding:  # the planned fault's own: the crash is for it
            self._closing = True
            return False
        if self._busy or self._unread():
            self._closing = True
            return True
        self.close()
        return False

    def _unread(self) -> bool:
        sock = self._transport.get_extra_info("socket")
        if sock is None:
            return False
        # A copy of the descriptor to peek with: uvloop's socket object does not read.
        with contextlib.suppress(OSError), socket.socket(fileno=os.dup(sock.fileno())) as peek:
            return bool(peek.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))  # nothing there: BlockingIOError
        return False

    def shutdown(self) -> None:
        if self.in_progress:
            self._closing = True
        else:
            self.close()
