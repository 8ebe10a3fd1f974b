"""A work-horse's round trip to Redis: several commands sent together, their replies read in order.

On redis-py's own connection (its pool, its handshake, its retry policy), but
written and read here, in Redis's wire format (RESP), for the few commands a
work-horse sends (HGET, HSET, HINCRBY, INCR, GET) and the replies they get:
integers, bulk strings, nulls, errors. In a work-horse, redis-py's encoder, its
socket buffer and its reply parser were most of the handler's Python for its
two round trips; this module does the same work in a small fraction of the
bytecodes. The replies come back as Redis sent them, as a
pipeline would give them without response callbacks: a bulk string as bytes,
an integer as an int, a null as None. An error reply is raised, as a pipeline
raises it.
"""

from __future__ import annotations

from typing import Any

from redis import Redis
from redis import exceptions as errors
from redis.connection import AbstractConnection

Command = tuple[str | bytes | int, ...]
_CHUNK = 65536


def batch(redis: Redis, *commands: Command) -> list[Any]:
    """The replies to `commands`, in order; an error reply is raised, as a pipeline raises it."""
    pool = redis.connection_pool
    conn = pool.get_connection()  # checked by the pool: connected, nothing unread on it
    try:
        # As a pipeline: a connection error resends the whole batch on a fresh connection.
        # redis-py leaves Connection.disconnect and send_packed_command unannotated.
        return conn.retry.call_with_retry(
            lambda: _exchange(conn, commands),
            lambda _: conn.disconnect(),  # type: ignore[no-untyped-call]
        )
    except BaseException:
        conn.disconnect()  # type: ignore[no-untyped-call]  # replies may be left unread: not to be reused
        raise
    finally:
        pool.release(conn)


def _exchange(conn: AbstractConnection, commands: tuple[Command, ...]) -> list[Any]:
    conn.send_packed_command([pack(commands)])  # type: ignore[no-untyped-call]
    sock = conn._sock  # redis-py's socket, connected by the send: its replies are read here
    assert sock is not None
    replies = Replies(len(commands))
    try:
        while not replies.done:
            data = sock.recv(_CHUNK)
            if not data:
                raise errors.ConnectionError("Connection closed by server.")
            replies.feed(data)
    # As redis-py reports them: its retry policy knows its own errors.
    except TimeoutError as exc:
        raise errors.TimeoutError(f"Timeout reading from socket: {exc}") from exc
    except OSError as exc:
        raise errors.ConnectionError(f"Error while reading from socket: {exc}") from exc
    return replies.values()


def pack(commands: tuple[Command, ...] | list[Command]) -> bytes:
    """The commands as one request: each an array of bulk strings."""
    parts = []
    for command in commands:
        parts.append(b"*%d\r\n" % len(command))
        for arg in command:
            data = arg if isinstance(arg, bytes) else str(arg).encode()
            parts.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(parts)


class Replies:
    """Replies read as they come in, until `count` are whole."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._data = b""
        self._pos = 0
        self._values: list[Any] = []

    @property
    def done(self) -> bool:
        return len(self._values) == self._count

    def feed(self, data: bytes) -> None:
        self._data = self._data[self._pos :] + data
        self._pos = 0
        while not self.done:
            end = self._data.find(b"\r\n", self._pos)
            if end < 0:
                return
            kind, line = self._data[self._pos : self._pos + 1], self._data[self._pos + 1 : end]
            if kind == b"$" and line != b"-1":
                size = int(line)
                if len(self._data) < end + 4 + size:
                    return  # the bulk string is not whole yet
                self._values.append(self._data[end + 2 : end + 2 + size])
                self._pos = end + 4 + size
                continue
            self._values.append(_scalar(kind, line))
            self._pos = end + 2
        if self._pos != len(self._data):
            raise errors.InvalidResponse("more replies than commands")

    def values(self) -> list[Any]:
        """The replies; the first error among them raised (the others read: the connection is clean)."""
        for value in self._values:
            if isinstance(value, errors.ResponseError):
                raise value
        return self._values


def _scalar(kind: bytes, line: bytes) -> Any:
    if kind == b":":
        return int(line)
    if kind in (b"_", b"$"):  # RESP3's null, RESP2's null bulk string
        return None
    if kind == b"+":
        return line
    if kind == b"-":
        return errors.ResponseError(line.decode(errors="replace"))
    raise errors.InvalidResponse(f"a reply this round trip does not expect: {kind!r}")
