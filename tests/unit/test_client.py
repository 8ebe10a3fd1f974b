"""The work-horse's client (workers/client.py) against a scripted peer on a unix
socket: what it sends again, and what it leaves to its caller."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from labcore.answers import Reply
from labcore.endpoints import unix_url
from workers import client

HEAD_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\ntransfer-encoding: chunked\r\n\r\n"
)
FULL_503 = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
    b"retry-after: 1\r\ncontent-length: 2\r\n\r\n{}"
)
CREATED = b'HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 14\r\n\r\n{"id":"eff_1"}'
RESET = b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"


def _read_request(conn: socket.socket) -> None:
    """All of it: hanging up on a request half read would fail the client's send, not its read."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += conn.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")), 0
    )
    while len(body) < length:
        body += conn.recv(65536)


@dataclass
class Peer:
    """What the scripted peer answers and what it saw."""

    url: str
    # The n-th connection's answers, one per request on it; then it hangs up.
    answers: list[tuple[bytes, ...]] = field(default_factory=list)
    requests: int = 0
    connections: int = 0


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[Peer]:
    path = str(tmp_path / "p.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen(8)
    peer = Peer(unix_url(path))

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            peer.connections += 1
            with conn:
                for answer in peer.answers[min(peer.connections, len(peer.answers)) - 1]:
                    _read_request(conn)
                    peer.requests += 1
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    client._conn = None  # a fresh work-horse
    yield peer
    server.close()
    client._conn = None


def _send(url: str, unprocessed: Callable[[], bool] = client.never) -> Reply:
    payload = {"reference": "op"}
    return client.send(url, "l", payload, key=None, attempt=1, chaos=None, timeout=5, unprocessed=unprocessed)


def test_a_503_whose_body_never_came_is_sent_again(peer: Peer) -> None:
    """A provider crashed on purpose may die between the head of its 503 and the body."""
    peer.answers += [(HEAD_503,), (CREATED,)]
    assert _send(peer.url).status == 201 and peer.requests == 2


def test_any_other_answer_cut_short_is_the_callers_to_judge(peer: Peer) -> None:
    peer.answers += [(RESET,), (CREATED,)]
    with pytest.raises(client.Incomplete):
        _send(peer.url, unprocessed=lambda: True)
    assert peer.requests == 1


def test_a_connection_that_cannot_be_made_is_tried_until_it_can(tmp_path: Path) -> None:
    """Nothing was sent: here no one listens yet, then a peer comes up."""
    path = tmp_path / "late.sock"
    url = unix_url(path)
    client._conn = None
    server = socket.socket(socket.AF_UNIX)

    def come_up() -> None:
        server.bind(str(path))
        server.listen(1)
        conn, _ = server.accept()
        with conn:
            _read_request(conn)
            conn.sendall(CREATED)

    timer = threading.Timer(0.2, come_up)
    timer.start()
    try:
        assert _send(url).status == 201
    finally:
        timer.join()
        server.close()
        client._conn = None


def test_a_line_break_never_reaches_the_wire(peer: Peer) -> None:
    """A header value is written as given: one with a line break would be a second header."""
    peer.answers += [(CREATED,)]
    with pytest.raises(ValueError, match="line break"):
        client.send(peer.url, "l", {"reference": "op"}, key="k\r\nX-Evil: 1", attempt=1, chaos=None, timeout=5)
    assert peer.requests == 0


def test_a_turned_away_request_goes_again_on_the_same_connection(peer: Peer) -> None:
    """One keep-alive connection per work-horse: a 503 with Retry-After keeps it open."""
    peer.answers += [(FULL_503, CREATED)]
    assert _send(peer.url).status == 201 and peer.connections == 1


def test_unanswered_is_sent_again_only_if_the_caller_knows_it_was_not_processed(peer: Peer) -> None:
    """In a provider-crash cell: any call but the armed one that reached its boundary."""
    peer.answers += [(b"",), (b"",), (CREATED,)]
    with pytest.raises(client.Unanswered):
        _send(peer.url)
    assert _send(peer.url, unprocessed=lambda: True).status == 201 and peer.requests == 3
