"""The provider's connections: an answer goes out in one write, and Nagle is off on TCP.

uvicorn writes an answer's head and body apart: two system calls, each of
which can wake the waiting client; and with Nagle on, the body waited for
the client's delayed ACK, so every request after the first on a keep-alive
connection took 40 ms more (httpx, requests and the work-horse's client turn
it off on their side already). Real sockets on loopback for Nagle, where
what is checked is the socket option itself, not a time; the coalescing
transport over a transport that records its writes.
"""

import asyncio
import socket

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from provider.server import _Coalescing, _Protocol


async def _app(scope: dict, receive: object, send: object) -> None:  # never called: no request is sent
    raise AssertionError("no request expected")


def _accepted_nodelay(protocol: type[HttpToolsProtocol]) -> int:
    """TCP_NODELAY on the provider's side of a connection accepted by `protocol`,
    from a listening socket made as uvicorn makes its own (no protocol named)."""
    config = uvicorn.Config(_app, http=protocol, log_level="warning")
    config.load()
    state = ServerState()
    made: list[HttpToolsProtocol] = []

    def factory() -> HttpToolsProtocol:
        made.append(protocol(config, state, {}))
        return made[-1]

    async def connect() -> int:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(factory, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        while not made or getattr(made[0], "transport", None) is None:
            await asyncio.sleep(0.001)
        value = made[0].transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        writer.close()
        made[0].transport.close()
        server.close()
        await server.wait_closed()
        return value

    return asyncio.run(connect())


def test_the_provider_turns_nagle_off_on_each_tcp_connection():
    assert _accepted_nodelay(_Protocol)


def test_asyncio_alone_leaves_nagle_on_for_such_a_socket():
    """Why the provider has to: asyncio turns Nagle off only for a socket that names IPPROTO_TCP."""
    assert not _accepted_nodelay(HttpToolsProtocol)


class _Recorder(asyncio.Transport):
    """What reached the socket: each write, and whether the transport was closed after them."""

    def __init__(self) -> None:
        super().__init__(extra={"peername": "the client"})
        self.writes: list[bytes] = []
        self.closed_after = -1

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed_after = len(self.writes)

    def is_closing(self) -> bool:
        return self.closed_after >= 0

    def get_write_buffer_size(self) -> int:
        return 0


def test_what_is_written_in_one_turn_of_the_loop_reaches_the_socket_as_one_write():
    async def answer() -> _Recorder:
        recorder = _Recorder()
        transport = _Coalescing(recorder, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n")  # uvicorn's head
        transport.write(b"{}")  # and its body, apart
        assert recorder.writes == []  # nothing yet: the turn is not over
        await asyncio.sleep(0)
        transport.write(b"next")  # a later turn: a write of its own
        await asyncio.sleep(0)
        return recorder

    recorder = asyncio.run(answer())
    assert recorder.writes == [b"HTTP/1.1 201 Created\r\ncontent-length: 2\r\n\r\n{}", b"next"]


def test_a_close_sends_what_was_written_before_it():
    async def refuse() -> _Recorder:
        recorder = _Recorder()
        transport = _Coalescing(recorder, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 400 Bad Request\r\n\r\n")
        transport.close()
        await asyncio.sleep(0)  # the turn's end finds nothing left to send
        return recorder

    recorder = asyncio.run(refuse())
    assert recorder.writes == [b"HTTP/1.1 400 Bad Request\r\n\r\n"]
    assert recorder.closed_after == 1


def test_what_a_client_that_went_away_would_have_been_sent_is_dropped():
    async def gone() -> _Recorder:
        recorder = _Recorder()
        transport = _Coalescing(recorder, asyncio.get_running_loop())
        transport.write(b"HTTP/1.1 201 Created\r\n\r\n")
        recorder.close()  # the connection was lost before the turn ended
        await asyncio.sleep(0)
        return recorder

    assert asyncio.run(gone()).writes == []


def test_everything_else_is_the_transports_own():
    recorder = _Recorder()
    transport = _Coalescing(recorder, loop := asyncio.new_event_loop())
    assert transport.get_extra_info("peername") == "the client"
    assert transport.get_write_buffer_size() == 0
    loop.close()
