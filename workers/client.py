"""The work-horse's HTTP client for the provider.

Plain `http.client`: a work-horse lives for one job, and this client's whole
request path is one small module, where a full-featured client costs a
work-horse several milliseconds of first-touch overhead on every job. One
keep-alive connection per work-horse, opened on first use.
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import time
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from labcore.answers import Lookup, Reply, Seen, seen, turned_away
from labcore.credentials import TOKEN_ENV, bearer
from labcore.endpoints import unix_path

# The run's token, from the worker's environment (inherited by each work-horse): sent on every call.
_AUTH = bearer(os.environ.get(TOKEN_ENV))


class Timeout(Exception):
    """The provider did not answer within the client timeout."""


_conn: http.client.HTTPConnection | None = None
_conn_base = ""


# A request whose connection could not be made (refused, unreachable, cut off)
# or that got a 503 with Retry-After was never processed: sending it again is
# safe. Anything else that fails is the caller's to judge, unless the caller
# knows that a request left unanswered was not processed either.
_RETRY_PAUSE = 0.02
_UNANSWERED = (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected)


class _NotSent(Exception):
    """The connection could not be made: nothing of the request left this host."""

    def __init__(self, cause: OSError) -> None:
        super().__init__(str(cause))
        self.cause = cause


def _connection(base: str, timeout: float) -> http.client.HTTPConnection:
    global _conn, _conn_base
    if _conn is not None and _conn.sock is not None and _dropped(_conn.sock):
        _conn.close()  # the provider closed it (it restarted): reconnect rather than send into it
    if _conn is None or _conn_base != base:
        path = unix_path(base)
        if path is not None:
            _conn = _UnixConnection(path, timeout)
        else:
            parts = urlsplit(base)
            _conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port or 80, timeout=timeout)
        _conn_base = base
    _conn.timeout = timeout
    if _conn.sock is not None:
        _conn.sock.settimeout(timeout)
    return _conn


class _UnixConnection(http.client.HTTPConnection):
    """HTTP on the unix socket of a provider on this host (see labcore.endpoints)."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self._path)
        except FileNotFoundError as exc:  # no provider there (yet): as a refused TCP connect
            sock.close()
            raise ConnectionRefusedError(str(exc)) from exc
        except OSError:
            sock.close()
            raise
        self.sock = sock


def _dropped(sock: socket.socket) -> bool:
    """An idle keep-alive socket with something to read has been closed by the peer."""
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _request(
    base: str,
    method: str,
    path: str,
    headers: dict[str, str],
    timeout: float,
    body: bytes | None = None,
    resend_unanswered: bool = False,
) -> tuple[int, dict[str, str], dict[str, Any]]:
    """One request; what the provider never processed is sent again until `timeout`."""
    deadline = time.monotonic() + timeout
    unprocessed: tuple[type[Exception], ...] = (_NotSent, *(_UNANSWERED if resend_unanswered else ()))
    while True:
        try:
            status, response_headers, parsed = _once(base, method, path, headers, timeout, body)
        except unprocessed as exc:
            if time.monotonic() + _RETRY_PAUSE > deadline:
                if not isinstance(exc, _NotSent):
                    raise
                if isinstance(exc.cause, TimeoutError):
                    raise Timeout(f"{method} {path}: no connection within {timeout} s") from exc.cause
                raise exc.cause from None
        else:
            if not turned_away(status, response_headers):
                return status, response_headers, parsed
            if time.monotonic() + _RETRY_PAUSE > deadline:
                return status, response_headers, parsed
        time.sleep(_RETRY_PAUSE)


def _once(
    base: str, method: str, path: str, headers: dict[str, str], timeout: float, body: bytes | None
) -> tuple[int, dict[str, str], dict[str, Any]]:
    global _conn
    conn = _connection(base, timeout)
    if conn.sock is None:
        try:
            conn.connect()
        except OSError as exc:
            conn.close()
            _conn = None
            raise _NotSent(exc) from exc
    try:
        conn.request(method, path, body=body, headers={**headers, **_AUTH})
        response = conn.getresponse()
        try:
            raw = response.read()
        except (http.client.HTTPException, OSError):
            # A 503 with Retry-After says in its head that nothing was processed: a provider
            # crashed on purpose may die between that head and its body, and the head is
            # the whole answer.
            if not turned_away(response.status, response.headers):
                raise
            conn.close()
            _conn = None
            raw = b""
    except TimeoutError as exc:
        conn.close()
        _conn = None
        raise Timeout(f"{method} {path} timed out after {timeout} s") from exc
    except (http.client.HTTPException, OSError):
        conn.close()
        _conn = None
        raise
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        parsed = {}
    return response.status, {k.lower(): v for k, v in response.getheaders()}, parsed if isinstance(parsed, dict) else {}


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
    resend_unanswered: bool = False,
) -> Reply:
    headers = {"Content-Type": "application/json", "X-Testbed-Attempt": str(attempt)}
    if key:
        headers["Idempotency-Key"] = key
    if chaos:
        headers["X-Testbed-Chaos"] = chaos
    status, response_headers, body = _request(
        base, "POST", _path(ledger), headers, timeout, json.dumps(payload).encode(), resend_unanswered
    )
    return Reply(status, str(body.get("id", "")), response_headers.get("idempotent-replayed") == "true")


def lookup(
    base: str, ledger: str, reference: str, fingerprint: str, *, timeout: float, resend_unanswered: bool = False
) -> Lookup:
    """The strongly consistent single-item read."""
    status, _, body = _request(base, "GET", _path(ledger, reference), {}, timeout, None, resend_unanswered)
    # A 404 is evidence of absence only when the provider says so (not for a ledger it does not know).
    return Lookup(
        seen(status, body.get("found") is False), str(body.get("id", "")), body.get("fingerprint") == fingerprint
    )


def search(
    base: str, ledger: str, reference: str, fingerprint: str, *, timeout: float, resend_unanswered: bool = False
) -> Lookup:
    """The listing filtered by reference: an empty page is all it can say about absence."""
    path = f"{_path(ledger)}?{urlencode({'reference': reference})}"
    status, _, body = _request(base, "GET", path, {}, timeout, None, resend_unanswered)
    if status != 200:
        return Lookup(Seen.UNKNOWN)
    data = body.get("data") or []
    if not data:
        return Lookup(Seen.EMPTY)
    last = data[-1]
    return Lookup(Seen.FOUND, str(last.get("id", "")), last.get("fingerprint") == fingerprint)
