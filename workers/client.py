"""The work-horse's HTTP client for the provider.

HTTP/1.1 written here and read by `httptools` (the C parser the provider's
server uses too): a work-horse lives for one job, and on that path
`http.client` costs markedly more CPU per request, most of it parsing the
answer's head through the email package, in a process that touches that code
for the first time. One keep-alive connection, opened on
first use, or before the fork by the worker (`keep_open`) for a provider on
a unix socket: then every work-horse of that worker sends on it, and one
that gives up on it mid-request shuts it down for the worker too.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import httptools

from labcore.answers import REPLAYED, CallFailure, Lookup, Reply, Seen, provider_failed, seen, turned_away
from labcore.credentials import TOKEN_ENV, bearer
from labcore.endpoints import unix_path

# The run's token, from the worker's environment (inherited by each work-horse): sent on every
# call, and what users' jobs' scoped URLs are signed from (labcore.scoped.ledger_secret).
TOKEN = os.environ.get(TOKEN_ENV) or None
_AUTH = "".join(f"{name}: {value}\r\n" for name, value in bearer(TOKEN).items())
_REPLAYED = REPLAYED.lower()  # as `_Answer` keeps header names
_CHUNK = 65536
_KEEP_OPEN_TIMEOUT = 1.0
# A connection the worker keeps is used again only this soon after its last work-horse
# ended: the provider (provider/connection.py) closes a connection idle for 5 s.
_IDLE_LIMIT = 1.0


class Timeout(Exception):
    """The provider did not answer within the client timeout."""


class Unanswered(ConnectionError):
    """The provider closed the connection before the first byte of an answer."""


class Incomplete(ConnectionError):
    """The provider closed the connection in the middle of an answer."""


# A request whose connection could not be made (refused, unreachable, cut off)
# or that got a 503 with Retry-After was never processed: sending it again is
# safe. Anything else that fails is the caller's to judge; for a request left
# unanswered the caller may know (`unprocessed`) that it was not processed
# either, and then it is sent again too.
_RETRY_PAUSE = 0.02
_UNANSWERED = (ConnectionResetError, BrokenPipeError, Unanswered)


class _NotSent(Exception):
    """The connection could not be made: nothing of the request left this host."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


@dataclass(slots=True)
class _Answer:
    """httptools' callbacks fill it as the answer comes in."""

    headers: dict[str, str] = field(default_factory=dict)
    body: bytearray = field(default_factory=bytearray)
    head_done: bool = False
    done: bool = False

    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.head_done = True

    def on_body(self, chunk: bytes) -> None:
        self.body += chunk

    def on_message_complete(self) -> None:
        self.done = True


@dataclass(slots=True)
class _Connection:
    base: str
    host: str  # the Host header
    sock: socket.socket
    # Kept by a worker for its work-horses: since when nobody has used it (its last work-horse's end).
    idle_since: float = field(default_factory=time.monotonic)


_conn: _Connection | None = None


def _connect(base: str, timeout: float) -> _Connection:
    path = unix_path(base)
    try:
        if path is not None:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            try:
                sock.connect(path)
            except FileNotFoundError as exc:  # no provider there (yet): as a refused TCP connect
                sock.close()
                raise ConnectionRefusedError(str(exc)) from exc
            except OSError:
                sock.close()
                raise
            return _Connection(base, "localhost", sock)
        parts = urlsplit(base)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        sock = socket.create_connection((host, port), timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(base, f"[{host}]:{port}" if ":" in host else f"{host}:{port}", sock)
    except OSError as exc:
        raise _NotSent(exc) from exc


def _connection(base: str, timeout: float) -> _Connection:
    """The work-horse's connection to `base`, made if there is none (or the provider closed it)."""
    global _conn
    if _conn is not None and (_conn.base != base or _dropped(_conn.sock)):
        drop()  # the provider closed it (it restarted): reconnect rather than send into it
    if _conn is None:
        _conn = _connect(base, timeout)
    _conn.sock.settimeout(timeout)
    return _conn


def keep_open(base: str) -> None:
    """In the worker, before it forks a work-horse: the connection to `base` that the
    work-horse will find open, if `base` is a unix socket that answers. A provider on
    the network is left to each work-horse: a connect there is subject to the faults
    the run makes on the network (a partition), and those are the work-horse's."""
    if unix_path(base) is None:
        return
    if _conn is not None and time.monotonic() - _conn.idle_since > _IDLE_LIMIT:
        drop()  # the provider may be closing it as the work-horse sends: it ends idle connections
    # Not there (a provider restarting): each work-horse connects, and retries, on its own.
    with contextlib.suppress(_NotSent):
        _connection(base, _KEEP_OPEN_TIMEOUT)


def horse_ended(clean: bool) -> None:
    """In the worker, once a work-horse forked with its connection is gone. Not `clean`
    (killed, or dead of an error): it may have left half a request or an unread answer."""
    if not clean:
        drop()
    elif _conn is not None:
        _conn.idle_since = time.monotonic()


def drop() -> None:
    """The connection is unusable by anyone: half a request may be on it, or an
    answer nobody read. Shut down, not only closed: a worker and the work-horses it
    forked share it, and the provider must see it end."""
    global _conn
    if _conn is not None:
        with contextlib.suppress(OSError):  # already reset by the peer
            _conn.sock.shutdown(socket.SHUT_RDWR)
        _conn.sock.close()
        _conn = None


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket with something to read has been closed by the peer."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _head(method: str, path: str, host: str, headers: dict[str, str], body: bytes | None) -> bytes:
    """The request's head as it goes on the wire (the token last)."""
    if any("\r" in text or "\n" in text for text in (path, *headers.values())):
        raise ValueError(f"a line break in the request's path or headers: {path!r} {headers!r}")
    lines = [f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n"]
    if body is not None:
        lines.append(f"Content-Length: {len(body)}\r\n")
    lines += [f"{name}: {value}\r\n" for name, value in headers.items()]
    return f"{''.join(lines)}{_AUTH}\r\n".encode("latin-1")


def never() -> bool:
    return False


# Told how a call failed in the end (what it sent again and got through is no failure).
Failed = Callable[[CallFailure, str], None]


def _unheard(failure: CallFailure, detail: str) -> None:
    pass


def _request(
    base: str,
    method: str,
    path: str,
    headers: dict[str, str],
    timeout: float,
    body: bytes | None = None,
    unprocessed: Callable[[], bool] = never,
    failed: Failed = _unheard,
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One request (`_sent`), and `failed` told if it failed: timed out, broke, or got a 5xx."""
    try:
        status, response_headers, parsed = _sent(base, method, path, headers, timeout, body, unprocessed)
    except Timeout as exc:
        failed(CallFailure.TIMEOUT, str(exc))
        raise
    except OSError as exc:
        failed(CallFailure.CONNECTION, f"{type(exc).__name__}: {exc}")
        raise
    if provider_failed(status):
        failed(CallFailure.STATUS, str(status))
    return status, response_headers, parsed


def _sent(
    base: str,
    method: str,
    path: str,
    headers: dict[str, str],
    timeout: float,
    body: bytes | None,
    unprocessed: Callable[[], bool],
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One request; what the provider never processed is sent again until `timeout`.
    `unprocessed()` is asked when a request goes unanswered."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            status, response_headers, parsed = _once(base, method, path, headers, timeout, body)
        except _NotSent as exc:
            if time.monotonic() + _RETRY_PAUSE > deadline:
                if isinstance(exc.cause, TimeoutError):
                    raise Timeout(f"{method} {path}: no connection within {timeout} s") from exc.cause
                raise exc.cause from None
        except _UNANSWERED:
            if time.monotonic() + _RETRY_PAUSE > deadline or not unprocessed():
                raise
        else:
            if not turned_away(status, response_headers):
                return status, response_headers, parsed
            if time.monotonic() + _RETRY_PAUSE > deadline:
                return status, response_headers, parsed
        time.sleep(_RETRY_PAUSE)


def _once(
    base: str, method: str, path: str, headers: dict[str, str], timeout: float, body: bytes | None
) -> tuple[int, dict[str, str], dict[str, Any]]:
    conn = _connection(base, timeout)
    answer = _Answer()
    parser = httptools.HttpResponseParser(answer)
    try:
        conn.sock.sendall(_head(method, path, conn.host, headers, body) + (body or b""))
        _read(conn.sock, parser, answer, f"{method} {path}")
    except TimeoutError as exc:
        drop()
        raise Timeout(f"{method} {path} timed out after {timeout} s") from exc
    except BaseException:  # an error, or the job's own timeout, in the middle of the exchange
        drop()
        raise
    status = parser.get_status_code()
    # (httptools' should_keep_alive() reads False once the answer is complete: from the head.)
    if not answer.done or parser.get_http_version() != "1.1" or answer.headers.get("connection", "").lower() == "close":
        drop()
    try:
        parsed = json.loads(answer.body) if answer.body else {}
    except ValueError:
        parsed = {}
    return status, answer.headers, parsed if isinstance(parsed, dict) else {}


def _read(sock: socket.socket, parser: httptools.HttpResponseParser, answer: _Answer, request: str) -> None:
    """Until the answer is whole. A 503 with Retry-After says in its head that nothing
    was processed: a provider crashed on purpose may die between that head and its
    body, and then the head is the whole answer."""
    while not answer.done:
        try:
            data = sock.recv(_CHUNK)
            if not data:
                raise Incomplete(f"{request}: answer cut short") if answer.head_done else Unanswered(request)
        except OSError:
            if answer.head_done and turned_away(parser.get_status_code(), answer.headers):
                return
            raise
        parser.feed_data(data)


def _path(ledger: str, reference: str | None = None) -> str:
    path = f"/ledgers/{quote(ledger, safe='')}/effects"
    return path if reference is None else f"{path}/{quote(reference, safe='')}"


def send(
    base: str,
    ledger: str,
    payload: dict[str, Any],
    *,
    key: str | None,
    attempt: int,
    chaos: str | None,
    timeout: float,
    unprocessed: Callable[[], bool] = never,
    failed: Failed = _unheard,
) -> Reply:
    headers = {"Content-Type": "application/json", "X-Testbed-Attempt": str(attempt)}
    if key:
        headers["Idempotency-Key"] = key
    if chaos:
        headers["X-Testbed-Chaos"] = chaos
    status, response_headers, body = _request(
        base, "POST", _path(ledger), headers, timeout, json.dumps(payload).encode(), unprocessed, failed
    )
    return Reply(status, str(body.get("id", "")), response_headers.get(_REPLAYED) == "true")


def lookup(
    base: str,
    ledger: str,
    reference: str,
    fingerprint: str,
    *,
    timeout: float,
    unprocessed: Callable[[], bool] = never,
    failed: Failed = _unheard,
) -> Lookup:
    """The strongly consistent single-item read."""
    status, _, body = _request(base, "GET", _path(ledger, reference), {}, timeout, None, unprocessed, failed)
    # A 404 is evidence of absence only when the provider says so (not for a ledger it does not know).
    return Lookup(
        seen(status, body.get("found") is False), str(body.get("id", "")), body.get("fingerprint") == fingerprint
    )


def search(
    base: str,
    ledger: str,
    reference: str,
    fingerprint: str,
    *,
    timeout: float,
    unprocessed: Callable[[], bool] = never,
    failed: Failed = _unheard,
) -> Lookup:
    """The listing filtered by reference: an empty page is all it can say about absence."""
    path = f"{_path(ledger)}?{urlencode({'reference': reference})}"
    status, _, body = _request(base, "GET", path, {}, timeout, None, unprocessed, failed)
    if status != 200:
        return Lookup(Seen.UNKNOWN)
    data = body.get("data") or []
    if not data:
        return Lookup(Seen.EMPTY)
    last = data[-1]
    return Lookup(Seen.FOUND, str(last.get("id", "")), last.get("fingerprint") == fingerprint)
