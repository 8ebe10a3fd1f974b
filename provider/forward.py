"""The proxy's wire: a job's request to a real destination sent on as it came, and the
destination's answer given back as it was given.

On the way there: the method, the path after the job's token (under the destination's
own base path), the query, the headers and the body. Host is the destination's, and
the hop-by-hop headers (RFC 9110, 7.6.1) are the connection's, not the request's: they
are left out, and the length is the body's own (the body came in whole, chunked or not).
A header sent more than once goes on as each of its lines. On the way back: the status,
its reason, the headers but the hop-by-hop ones (each line of a repeated one, as
`Set-Cookie`), the body. Neither way is a body cut short: a request over
`provider.wire.MAX_FORWARDED_BODY` is refused before it is forwarded, an answer over
MAX_ANSWER is not passed back, and the provider notes either as its own failure.

Each request goes on its own connection to the destination, closed after its answer:
a kept-alive one that the destination closed meanwhile fails where no one can tell
whether it got the request, and to send an effect again would make the duplicate the
lab is there to count. It runs in a thread of its own (`provider.service`), which may
hold it at its boundaries, so the client is the standard library's, blocking.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterable
from dataclasses import dataclass
from http import HTTPStatus

from labcore.destination import Destination

FORWARD_TIMEOUT = 60.0  # seconds a destination may take to answer
MAX_ANSWER = 64 * 1024 * 1024  # bytes of a destination's answer passed back; past them, none is (TooLarge)
HOP_BY_HOP = frozenset(
    {
        b"connection",
        b"keep-alive",
        b"proxy-authenticate",
        b"proxy-authorization",
        b"proxy-connection",
        b"te",
        b"trailer",
        b"transfer-encoding",
        b"upgrade",
    }
)
# Not passed on: the destination's own (Host), or the length and the expectation already dealt with.
_NOT_SENT = HOP_BY_HOP | {b"host", b"content-length", b"expect"}
_NOT_RETURNED = HOP_BY_HOP | {b"content-length"}


@dataclass(frozen=True, slots=True)
class Passed:
    """A destination's answer, as given back to the job."""

    status: int
    reason: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes
    length: int | None = None  # a HEAD's: what the destination said its body's length would be

    def encode(self, keep_alive: bool, head_only: bool) -> bytes:
        """The answer on the wire, in one piece."""
        lines = [b"HTTP/1.1 %d %s\r\n" % (self.status, self.reason.encode("latin-1", "replace"))]
        lines += [b"%s: %s\r\n" % header for header in self.headers]
        length = self.length if head_only and self.length is not None else len(self.body)
        lines.append(b"content-length: %d\r\n" % length)
        if not keep_alive:
            lines.append(b"connection: close\r\n")
        lines.append(b"\r\n")
        if not head_only:
            lines.append(self.body)
        return b"".join(lines)


def failed(status: HTTPStatus, why: str) -> Passed:
    """The lab's own answer when the destination gave none."""
    body = json.dumps({"error": why}).encode()
    return Passed(status.value, status.phrase, ((b"content-type", b"application/json"),), body)


class DestinationDown(Exception):
    """The destination could not be reached, or did not answer in time: nothing came back."""


class TooLarge(Exception):
    """The destination answered more than the proxy passes back: a part of it is no answer to give."""


def forward(
    destination: Destination, method: str, path: str, query: str, headers: Iterable[tuple[bytes, bytes]], body: bytes
) -> Passed:
    """Send the request on to the destination and return its answer; DestinationDown if none came,
    TooLarge if it is over MAX_ANSWER. `headers`: every line as sent, a repeated name's included."""
    scheme, host, port = destination.origin
    connection_type = http.client.HTTPSConnection if scheme == "https" else http.client.HTTPConnection
    connection = connection_type(host, port, timeout=FORWARD_TIMEOUT)
    target = destination.base_path + path + (f"?{query}" if query else "")
    try:
        connection.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host if port in (80, 443) else f"{host}:{port}")
        for name, value in headers:
            if name not in _NOT_SENT:
                connection.putheader(name.decode("latin-1"), value.decode("latin-1"))
        if body or method in ("POST", "PUT", "PATCH"):
            connection.putheader("Content-Length", str(len(body)))
        connection.putheader("Connection", "close")
        connection.endheaders(body or None)
        response = connection.getresponse()
        answer = response.read(MAX_ANSWER + 1)
        if len(answer) > MAX_ANSWER:
            raise TooLarge(
                f"the destination's answer is over {MAX_ANSWER} bytes, which the lab's proxy does not pass back"
            )
        given = tuple(
            (name.lower().encode("latin-1"), value.encode("latin-1"))
            for name, value in response.getheaders()
            if name.lower().encode("latin-1") not in _NOT_RETURNED
        )
        declared = response.getheader("content-length")
        length = int(declared) if method == "HEAD" and declared and declared.isdigit() else None
        return Passed(response.status, response.reason, given, answer, length)
    except (OSError, http.client.HTTPException) as exc:
        raise DestinationDown(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()
