"""The provider's connections: the unarmed send answered in the protocol, an answer in one write, Nagle off on TCP.

The unarmed send is answered by the server's protocol, without the app, once
its body is whole, and anything the fast path does not take reaches the app
as uvicorn would have handed it over (a protocol fed bytes, over a transport
that records its writes).

uvicorn writes an answer's head and body apart: two system calls, each of
which can wake the waiting client; and with Nagle on, the body waited for
the client's delayed ACK, so every request after the first on a keep-alive
connection took 40 ms more (httpx, requests and the work-horse's client turn
it off on their side already). Real sockets on loopback for Nagle, where
what is checked is the socket option itself, not a time; the coalescing
transport over a transport that records its writes.
"""

import asyncio
import json
import logging
import socket
import threading
from collections.abc import Callable

import uvicorn
from uvicorn.logging import AccessFormatter
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from provider.fast import Held
from provider.ledger import Answer
from provider.server import _Coalescing, _Protocol
from provider.wire import MAX_BODY


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

    reading = True

    def pause_reading(self) -> None:  # uvicorn's flow control, for a body past its high-water mark
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


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


SEND = b"POST /ledgers/l/effects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


class _Served:
    """A protocol on a recording transport, with a fast path and an app that each say what they were given."""

    def __init__(self, fast_answers: bool, access_log: bool = False) -> None:
        # Made first: uvicorn's configuration sets its loggers up anew.
        level = "info" if access_log else "warning"
        self._config = uvicorn.Config(
            self.asgi, http=_Protocol, log_level=level, interface="asgi3", access_log=access_log
        )
        self._config.load()
        self.fast: list[tuple[bytes, list[tuple[bytes, bytes]], bytes]] = []
        self.app: list[tuple[str, bytes]] = []
        self._fast_answers = fast_answers

    def fast_path(self, method: bytes, url: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> Answer | None:
        """Takes every POST (when it answers at all); what it is handed of anything else goes to the app."""
        self.fast.append((url, headers, body))
        if method != b"POST" or not self._fast_answers:
            return None
        return Answer(201, {"id": "eff_1", "reference": "op-1"}, replayed=True)

    async def asgi(self, scope: dict, receive, send) -> None:  # type: ignore[no-untyped-def]
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        self.app.append((scope["path"], body))
        await send({"type": "http.response.start", "status": 202, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    def run(self, *chunks: bytes) -> _Recorder:
        async def serve() -> _Recorder:
            protocol = _Protocol(self._config, ServerState(), {}, fast=self.fast_path)
            recorder = _Recorder()
            protocol.connection_made(recorder)
            for chunk in chunks:
                protocol.data_received(chunk)
            for _ in range(20):  # the app's task, and the coalesced writes, to their end
                await asyncio.sleep(0)
            return recorder

        return asyncio.run(serve())


def test_the_fast_path_answers_a_send_without_the_app_in_one_write_of_what_the_app_would_write():
    body = json.dumps({"reference": "op-1"}).encode()
    served = _Served(fast_answers=True)
    recorder = served.run(SEND % len(body) + body[:5], body[5:])  # the body in two reads
    assert served.fast == [
        (
            b"/ledgers/l/effects",
            [(b"host", b"x"), (b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))],
            body,
        )
    ]
    assert served.app == []
    (answer,) = recorder.writes
    head, _, sent = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 201 Created"
    assert b"idempotent-replayed: true" in lines and b"content-type: application/json" in lines
    assert json.loads(sent) == {"id": "eff_1", "reference": "op-1"}
    assert b"content-length: %d" % len(sent) in lines
    assert recorder.closed_after == -1  # kept alive, as HTTP/1.1 asks


def test_a_request_the_fast_path_does_not_take_reaches_the_app_whole():
    body = json.dumps({"reference": "op-1"}).encode()
    served = _Served(fast_answers=False)
    recorder = served.run(SEND % len(body) + body[:5], body[5:])
    assert len(served.fast) == 1
    assert served.app == [("/ledgers/l/effects", body)]
    assert recorder.writes[0].startswith(b"HTTP/1.1 202 Accepted")


def test_other_methods_and_oversized_bodies_go_to_the_app_unseen_by_the_fast_path():
    served = _Served(fast_answers=True)
    big = b"x" * (MAX_BODY + 10)
    served.run(b"DELETE /ledgers/l/effects/op-1 HTTP/1.1\r\nHost: x\r\n\r\n")
    served.run(SEND % len(big) + big[:1000], big[1000:])
    assert served.fast == []
    assert served.app == [("/ledgers/l/effects/op-1", b""), ("/ledgers/l/effects", big)]


def test_an_http_1_0_send_is_answered_and_closed():
    body = b"{}"
    served = _Served(fast_answers=True)
    recorder = served.run((SEND % len(body)).replace(b"HTTP/1.1", b"HTTP/1.0") + body)
    assert b"connection: close" in recorder.writes[0].split(b"\r\n")
    assert recorder.closed_after == 1


def test_with_an_access_log_the_fast_path_logs_the_line_uvicorn_would():
    """`testbed provider` logs every request: its sends too, in uvicorn's own format."""
    lines: list[str] = []
    handler = logging.Handler()
    formatter = AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s', use_colors=False)  # uvicorn's
    handler.emit = lambda record: lines.append(formatter.format(record))  # type: ignore[method-assign]
    served = _Served(fast_answers=True, access_log=True)
    access = logging.getLogger("uvicorn.access")  # uvicorn's configuration stops it propagating
    access.addHandler(handler)
    try:
        served.run(SEND % 2 + b"{}")
    finally:
        access.removeHandler(handler)
    assert len(lines) == 1 and lines[0].endswith('"POST /ledgers/l/effects HTTP/1.1" 201 Created')


def test_a_send_right_behind_an_answer_of_the_app_goes_out_after_it():
    """The app's answer waits in the coalescing transport for the end of the loop's turn:
    a send the fast path answers in between must not overtake it."""
    served = _Served(fast_answers=True)

    async def serve() -> _Recorder:
        protocol = _Protocol(served._config, ServerState(), {}, fast=served.fast_path)
        recorder = _Recorder()
        protocol.connection_made(recorder)
        protocol.data_received(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        while not served.app:  # the app's task runs; its answer is written, not yet sent
            await asyncio.sleep(0)
        assert recorder.writes == []
        protocol.data_received(SEND % 2 + b"{}")
        await asyncio.sleep(0)
        return recorder

    sent = b"".join(asyncio.run(serve()).writes)
    assert sent.startswith(b"HTTP/1.1 202 Accepted")
    assert sent.index(b"HTTP/1.1 201 Created") > 0


ARMED = Answer(201, {"id": "eff_2", "reference": "op-2"})


def _held(data: bytes, while_held: Callable[[_Protocol, _Recorder], None]) -> tuple[_Recorder, list[bool]]:
    """A protocol whose every request is an armed send, held until `while_held` has looked
    at it (its first request's hold); what was written, and whether a request was in
    progress as each held answer's gate was left."""
    release, done = threading.Event(), []
    config = uvicorn.Config(_app, http=_Protocol, log_level="warning")
    config.load()

    def hold() -> Answer:
        release.wait(5)
        return ARMED

    def fast(*_: object) -> Held:
        return Held(hold, lambda: done.append(protocol.in_progress))

    async def serve() -> _Recorder:
        nonlocal protocol
        protocol = _Protocol(config, ServerState(), {}, fast=fast)
        recorder = _Recorder()
        protocol.connection_made(recorder)
        protocol.data_received(data)
        await asyncio.sleep(0.01)
        while_held(protocol, recorder)
        release.set()
        while not done:
            await asyncio.sleep(0.001)
        return recorder

    protocol: _Protocol
    return asyncio.run(serve()), done


def test_an_armed_send_is_answered_from_its_thread_the_connection_reading_nothing_meanwhile():
    """Held at its boundaries in a thread of its own; answered, and the gate left, once the hold ends."""

    def held(protocol: _Protocol, recorder: _Recorder) -> None:
        assert recorder.writes == [] and not recorder.reading and protocol.in_progress

    recorder, done = _held(SEND % 2 + b"{}", held)
    (answer,) = recorder.writes
    assert answer.startswith(b"HTTP/1.1 201 Created") and answer.endswith(b'{"id":"eff_2","reference":"op-2"}')
    assert recorder.reading and done == [False]  # written, then the gate left; reading again


def test_a_request_pipelined_behind_a_held_send_is_refused_and_the_held_answer_dropped():
    """No client of the lab's sends one; one that did must not be answered out of order."""
    recorder, done = _held(SEND % 2 + b"{}" + SEND % 2 + b"{}", lambda *_: None)  # the second before an answer
    (refusal,) = recorder.writes
    assert refusal.startswith(b"HTTP/1.1 400 Bad Request") and recorder.closed_after == 1
    assert len(done) == 1  # the held one's gate left all the same
