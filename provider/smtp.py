"""The SMTP relay's wire (RFC 5321, the server's side): bytes a job's mail client sent in,
replies out, and each whole message as a `Mail` to relay. Sans-IO: `provider.mail` reads
the socket and writes what this gives back; no other module parses SMTP.

The relay takes a message whole before anything goes on (store and forward, as
`provider.forward` takes a request whole): MAIL and RCPT are answered here, and the
message goes to the destination once its DATA has ended, on a connection of its own.
So the end of DATA is the one point where the message is an effect, the one the lab
holds at (`before-effect`: the DATA is here and not passed on; `after-effect`: the
destination has replied and its reply is held).

A client must authenticate first (AUTH PLAIN, the one mechanism offered): the password
is the attempt's signed token, so a message is attributed to its op and attempt by its
connection's credential, which any mail client sends as configured, and which is the
lab's and never passed on. MAIL before AUTH is refused (530), as the HTTP proxy refuses
a request without a token. PIPELINING is not offered: a client waits for each reply,
so nothing comes in while a message is held; what came anyway waits in the session.
"""

from __future__ import annotations

import base64
import binascii
import email.parser
import email.policy
from collections.abc import Callable
from dataclasses import dataclass, field

MAX_LINE = 1000  # octets of a line, CRLF included (RFC 5321, 4.5.3.1.6)
MAX_MESSAGE = 16 * 1024 * 1024  # octets of a message's DATA, as the HTTP proxy's body (provider.wire)
NAME = "testbed-relay"


@dataclass(frozen=True, slots=True)
class Reply:
    code: int
    text: str  # lines joined by "\n", as smtplib gives a reply's text

    def encode(self) -> bytes:
        lines = self.text.split("\n") or [""]
        out = [f"{self.code}-{line}\r\n" for line in lines[:-1]] + [f"{self.code} {lines[-1]}\r\n"]
        return "".join(out).encode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class Mail:
    """One message, whole, as the job sent it: to relay."""

    credential: str  # the password it authenticated with: the attempt's token
    helo: str  # the name it greeted with, which the relay greets the destination with
    sender: str
    options: tuple[str, ...]  # MAIL FROM's parameters (SIZE=..., BODY=8BITMIME)
    recipients: tuple[str, ...]
    data: bytes  # the message, dot-unstuffed, lines ending in CRLF

    @property
    def message_id(self) -> str:
        """Its Message-ID header, as the job wrote it ("" if it has none)."""
        headers = email.parser.BytesHeaderParser(policy=email.policy.compat32).parsebytes(self.data)
        return str(headers.get("Message-ID", "")).strip()


GREETING = Reply(220, f"{NAME} ESMTP the lab's relay")
OK = Reply(250, "2.0.0 OK")
_EHLO = f"{NAME}\nAUTH PLAIN\n8BITMIME\nSIZE {MAX_MESSAGE}"
_AUTHENTICATED = Reply(235, "2.7.0 Authentication successful")
_NOT_SCOPED = Reply(535, "5.7.8 Authentication credentials invalid: not an attempt's token")
_AUTH_FIRST = Reply(530, "5.7.0 Authentication required: the password is TESTBED_DESTINATION_URL's")
_MECHANISM = Reply(504, "5.5.4 Unrecognized authentication type: PLAIN only")
_BAD_AUTH = Reply(501, "5.5.2 Cannot decode the AUTH response")
_SEQUENCE = Reply(503, "5.5.1 Bad sequence of commands")
_SYNTAX = Reply(501, "5.5.4 Syntax error in parameters or arguments")
_UNKNOWN = Reply(500, "5.5.2 Command not recognized")
_LINE_TOO_LONG = Reply(500, "5.5.6 Line too long")
_TOO_BIG = Reply(552, f"5.3.4 Message over {MAX_MESSAGE} octets, which the lab's relay does not pass on")
_DATA = Reply(354, "End data with <CR><LF>.<CR><LF>")
_BYE = Reply(221, "2.0.0 Bye")


@dataclass(slots=True)
class _Transaction:
    sender: str | None = None
    options: tuple[str, ...] = ()
    recipients: list[str] = field(default_factory=list)


class Session:
    """One client's connection. `feed` takes what came in and gives back what to write, and at
    most one `Mail`, last: its reply is the caller's to get (`relayed`), and nothing after it
    is read until then. `accepts(password)` says whether a credential is an attempt's."""

    def __init__(self, accepts: Callable[[str], bool]) -> None:
        self._accepts = accepts
        self._buffer = b""
        self._helo: str | None = None
        self._credential: str | None = None
        self._auth_pending = False  # "334" sent: the next line is the AUTH response
        self._transaction = _Transaction()
        self._data: list[bytes] | None = None  # in DATA: the lines so far
        self._size = 0
        self._relaying = False
        self.closed = False  # QUIT answered: the caller closes the connection

    def feed(self, data: bytes) -> list[bytes | Mail]:
        self._buffer += data
        return self._process()

    def relayed(self, reply: Reply) -> list[bytes | Mail]:
        """The held message's reply, to write; then what had come in after it."""
        self._relaying = False
        return [reply.encode(), *self._process()]

    def _process(self) -> list[bytes | Mail]:
        out: list[bytes | Mail] = []
        while not self._relaying and not self.closed:
            end = self._buffer.find(b"\n")
            if end < 0:
                if len(self._buffer) > MAX_LINE and self._data is None:
                    self._buffer = b""
                    out.append(_LINE_TOO_LONG.encode())
                elif len(self._buffer) > MAX_MESSAGE:  # a line of DATA with no end: counted, not kept
                    self._size += len(self._buffer)
                    self._buffer = b""
                break
            line, self._buffer = self._buffer[: end + 1], self._buffer[end + 1 :]
            line = line.rstrip(b"\r\n")
            if self._data is not None:
                item = self._data_line(line)
            elif len(line) + 2 > MAX_LINE:
                item = _LINE_TOO_LONG
            else:
                item = self._command(line.decode("utf-8", "replace"))
            if isinstance(item, Mail):
                self._relaying = True
                out.append(item)
            elif item is not None:
                out.append(item.encode())
        return out

    def _data_line(self, line: bytes) -> Reply | Mail | None:
        assert self._data is not None
        if line == b".":
            lines, self._data = self._data, None
            t, self._transaction = self._transaction, _Transaction()
            if self._size > MAX_MESSAGE:
                return _TOO_BIG
            assert self._credential is not None and self._helo is not None and t.sender is not None
            body = b"".join(part + b"\r\n" for part in lines)
            return Mail(self._credential, self._helo, t.sender, t.options, tuple(t.recipients), body)
        if line.startswith(b"."):  # dot-stuffed (RFC 5321, 4.5.2)
            line = line[1:]
        self._size += len(line) + 2
        if self._size <= MAX_MESSAGE:  # past it, read to the end and refuse: never cut short
            self._data.append(line)
        return None

    def _command(self, line: str) -> Reply | None:
        if self._auth_pending:
            self._auth_pending = False
            return self._authenticate(line)
        verb, _, rest = line.partition(" ")
        verb, rest = verb.upper(), rest.strip()
        match verb:
            case "EHLO" | "HELO":
                if not rest:
                    return _SYNTAX
                self._helo, self._transaction = rest, _Transaction()
                return Reply(250, _EHLO if verb == "EHLO" else NAME)
            case "AUTH":
                return self._auth(rest)
            case "MAIL":
                return self._mail(rest)
            case "RCPT":
                return self._rcpt(rest)
            case "DATA":
                if rest:
                    return _SYNTAX
                if not self._transaction.recipients:
                    return _SEQUENCE
                self._data, self._size = [], 0
                return _DATA
            case "RSET":
                self._transaction = _Transaction()
                return OK
            case "NOOP":
                return OK
            case "VRFY":
                return Reply(252, "2.5.0 Cannot VRFY user")
            case "QUIT":
                self.closed = True
                return _BYE
        return _UNKNOWN

    def _auth(self, rest: str) -> Reply:
        if self._helo is None or self._credential is not None or self._transaction.sender is not None:
            return _SEQUENCE
        mechanism, _, initial = rest.partition(" ")
        if mechanism.upper() != "PLAIN":
            return _MECHANISM
        if not initial.strip():
            self._auth_pending = True
            return Reply(334, "")
        return self._authenticate(initial.strip())

    def _authenticate(self, response: str) -> Reply:
        if response == "*":
            return _BAD_AUTH
        try:
            parts = base64.b64decode(response, validate=True).split(b"\0")
        except (binascii.Error, ValueError):
            return _BAD_AUTH
        if len(parts) != 3:
            return _BAD_AUTH
        password = parts[2].decode("utf-8", "replace")
        if not self._accepts(password):
            return _NOT_SCOPED
        self._credential = password
        return _AUTHENTICATED

    def _mail(self, rest: str) -> Reply:
        if self._helo is None or self._transaction.sender is not None:
            return _SEQUENCE
        if self._credential is None:
            return _AUTH_FIRST
        address = _path(rest, "FROM:")
        if address is None:
            return _SYNTAX
        sender, options = address
        self._transaction = _Transaction(sender, options)
        return OK

    def _rcpt(self, rest: str) -> Reply:
        if self._transaction.sender is None:
            return _SEQUENCE
        address = _path(rest, "TO:")
        if address is None or not address[0]:
            return _SYNTAX
        self._transaction.recipients.append(address[0])
        return OK


def _path(rest: str, keyword: str) -> tuple[str, tuple[str, ...]] | None:
    """`FROM:<a@b> SIZE=1` as ("a@b", ("SIZE=1",)); None if it is not one."""
    if not rest.upper().startswith(keyword):
        return None
    given = rest[len(keyword) :].strip()
    if not given.startswith("<") or ">" not in given:
        return None
    address, _, options = given[1:].partition(">")
    return address, tuple(options.split())
