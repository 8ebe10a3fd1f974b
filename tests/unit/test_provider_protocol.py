"""The provider's connections: a request handed whole to the service, its answer in one write, Nagle off on TCP.

A connection is fed bytes over a transport that records its writes, with a
service that records what it was handed and answers as told (the service's
own answers are tests/unit/test_provider_service.py's). Nagle is checked on
real sockets on loopback, where what is checked is the socket option itself,
not a time: with Nagle on, an answer written while the client has not yet
acknowledged the last one waits for its delayed ACK, 40 ms on a keep-alive
connection.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import threading
from collections.abc import Callable

from provider.connection import Budget, Connection, Connections
from provider.limits import IDLE_TICKS, MAX_HEAD, MAX_HEADERS, REQUEST_TICKS
from provider.peers import Client, Peers
from provider.service import Failures, HeldSend, Request, Response, cause_of
from provider.wire import MAX_BODY

SEND = b"POST /ledgers/l/effects HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
FORWARDED_CAP = MAX_BODY * 4  # what Told lets a job's request to its destination carry (`Service.body_cap`)
CREATED = Response(201, {"id": "eff_1", "reference": "op-1"}, replayed=True)


class Told:
    """A service that answers every request as told, and keeps what it was handed."""

    def __init__(
        self, answer: Response | Callable[[], Response | HeldSend] = CREATED, needs_token: bool = False
    ) -> None:
        self.requests: list[Request] = []
        self._answer = answer
        self.needs_token = needs_token  # then a body is read only after an Authorization header
        self.failures = Failures()

    def failed(self, exc: Exception) -> Response:
        return Response(500, {"error": cause_of(exc)})

    def handle(self, request: Request) -> Response | HeldSend:
        self.requests.append(request)
        return self._answer if isinstance(self._answer, Response) else self._answer()

    def reads_body(self, request: Request) -> bool:
        return b"authorization" in request.headers or not self.needs_token

    def body_cap(self, request: Request) -> int:
        return FORWARDED_CAP if request.path.startswith("/d/good/") else MAX_BODY


class Recorder(asyncio.Transport):
    """What reached the socket: each write, and whether the transport was closed after them."""

    def __init__(self) -> None:
        super().__init__(extra={"peername": ("127.0.0.1", 5000)})
        self.writes: list[bytes] = []
        self.closed_after = -1
        self.reading = True

    def write(self, data: bytes) -> None:  # type: ignore[override]
        self.writes.append(bytes(data))

    def close(self) -> None:
        if self.closed_after < 0:
            self.closed_after = len(self.writes)

    def is_closing(self) -> bool:
        return self.closed_after >= 0

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True


def served(service: Told, *chunks: bytes, access: logging.Logger | None = None) -> tuple[Recorder, Connection]:
    async def serve() -> tuple[Recorder, Connection]:
        connection = Connections(service, asyncio.get_running_loop(), access)()  # type: ignore[arg-type]
        recorder = Recorder()
        connection.connection_made(recorder)
        for chunk in chunks:
            connection.data_received(chunk)
        return recorder, connection

    return asyncio.run(serve())


def _accepted_nodelay(factory: Callable[[asyncio.AbstractEventLoop], Callable[[], asyncio.Protocol]]) -> int:
    """TCP_NODELAY on the server's side of a connection accepted from a listening socket
    made with no protocol named, as the provider's own are."""

    async def connect() -> int:
        made: list[asyncio.Protocol] = []
        protocol = factory(asyncio.get_running_loop())

        def accept() -> asyncio.Protocol:
            made.append(protocol())
            return made[-1]

        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        server = await asyncio.get_running_loop().create_server(accept, sock=listener)
        _, writer = await asyncio.open_connection(*listener.getsockname())
        while not made or getattr(made[0], "transport", getattr(made[0], "_transport", None)) is None:
            await asyncio.sleep(0.001)
        transport = getattr(made[0], "transport", None) or made[0]._transport  # type: ignore[attr-defined]
        value = transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
        writer.close()
        transport.close()
        server.close()
        await server.wait_closed()
        return int(value)

    return asyncio.run(connect())


class _Plain(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport


def test_the_provider_turns_nagle_off_on_each_tcp_connection() -> None:
    assert _accepted_nodelay(lambda loop: Connections(Told(), loop))  # type: ignore[arg-type]


def test_asyncio_alone_leaves_nagle_on_for_such_a_socket() -> None:
    """Why the provider has to: asyncio turns Nagle off only for a socket that names IPPROTO_TCP."""
    assert not _accepted_nodelay(lambda loop: _Plain)


def test_a_request_reaches_the_service_whole_and_its_answer_goes_out_in_one_write() -> None:
    body = json.dumps({"reference": "op-1"}).encode()
    service = Told()
    recorder, connection = served(service, SEND % len(body) + body[:5], body[5:])  # the body in two reads
    (request,) = service.requests
    assert (request.method, request.path, request.query, request.body) == ("POST", "/ledgers/l/effects", "", body)
    assert request.headers[b"content-type"] == b"application/json" and not request.oversized
    (answer,) = recorder.writes
    head, _, sent = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 201 Created" and lines[1].startswith(b"date: ")
    assert b"idempotent-replayed: true" in lines and b"content-type: application/json" in lines
    assert json.loads(sent) == {"id": "eff_1", "reference": "op-1"}
    assert b"content-length: %d" % len(sent) in lines
    assert recorder.closed_after == -1 and not connection.in_progress  # kept alive, as HTTP/1.1 asks


def test_pipelined_requests_are_answered_in_order_each_in_one_write() -> None:
    service = Told()
    health = b"GET /health?verbose=1 HTTP/1.1\r\nHost: x\r\n\r\n"
    recorder, _ = served(service, health + SEND % 2 + b"{}")
    assert [(r.method, r.path, r.query) for r in service.requests] == [
        ("GET", "/health", "verbose=1"),
        ("POST", "/ledgers/l/effects", ""),
    ]
    assert len(recorder.writes) == 2


def test_headers_are_read_in_lower_case_the_first_of_a_repeated_one_kept_and_trailing_space_dropped() -> None:
    service = Told()
    served(service, b"GET /health HTTP/1.1\r\nHost: x\r\nX-Name: one  \r\nx-name: two\r\n\r\n")
    assert service.requests[0].headers[b"x-name"] == b"one"
    assert service.requests[0].headers.lines() == [(b"host", b"x"), (b"x-name", b"one"), (b"x-name", b"two")]


def test_an_http_1_0_request_is_answered_and_closed() -> None:
    recorder, _ = served(Told(), (SEND % 2).replace(b"HTTP/1.1", b"HTTP/1.0") + b"{}")
    assert b"connection: close" in recorder.writes[0].split(b"\r\n")
    assert recorder.closed_after == 1


def test_an_answer_that_ends_the_connection_says_so_and_closes_it() -> None:
    refused = Response(401, {"error": "no"}, headers=((b"www-authenticate", b"Bearer"),), close=True)
    recorder, _ = served(Told(refused), SEND % 2 + b"{}")
    (answer,) = recorder.writes
    assert b"www-authenticate: Bearer\r\n" in answer and b"connection: close\r\n" in answer
    assert recorder.closed_after == 1


def test_a_request_for_an_upgrade_is_answered_as_a_plain_one_and_the_connection_closed() -> None:
    upgrade = b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"
    recorder, _ = served(Told(), upgrade)
    assert recorder.writes[0].startswith(b"HTTP/1.1 201 Created") and recorder.closed_after == 1


def test_a_head_request_gets_the_head_of_its_answer() -> None:
    recorder, _ = served(Told(), b"HEAD /health HTTP/1.1\r\nHost: x\r\n\r\n")
    assert recorder.writes[0].endswith(b"\r\n\r\n") and b"content-length: 33" in recorder.writes[0]


def test_a_body_over_the_cap_is_answered_from_its_head_and_not_read() -> None:
    """Declared or found so: the service is handed the head alone, once, and the connection is closed."""
    big = b"x" * (MAX_BODY + 10)
    for declared in (True, False):
        service = Told()
        head = SEND % len(big) if declared else SEND.replace(b"Content-Length: %d", b"Transfer-Encoding: chunked")
        chunks = [big] if declared else [b"%x\r\n%s\r\n" % (len(big[:40000]), big[:40000])] * 2 + [b"0\r\n\r\n"]
        recorder, connection = served(service, head, *chunks)
        (request,) = service.requests
        assert request.oversized and len(request.body) == 0
        assert len(recorder.writes) == 1 and recorder.closed_after == 1
        assert not connection.in_progress


def test_a_jobs_request_to_its_destination_is_read_up_to_the_cap_the_service_gives_it() -> None:
    """Over MAX_BODY and under the service's cap for it: read whole; past that cap, the head alone."""
    for path, size, whole in (
        (b"/d/good/upload", FORWARDED_CAP, True),
        (b"/d/good/upload", FORWARDED_CAP + 1, False),
        (b"/d/bad/upload", MAX_BODY + 1, False),
    ):
        service = Told()
        head = (SEND % size).replace(b"/ledgers/l/effects", path)
        served(service, head, b"x" * size)
        (request,) = service.requests
        assert (len(request.body) == size, request.oversized) == (whole, not whole), (path, size)


def test_a_request_that_is_not_http_is_refused_and_the_connection_closed() -> None:
    service = Told()
    for data in (
        b"GARBAGE\r\n\r\n",
        b"GET /h\xc3\xa9 HTTP/1.1\r\nHost: x\r\n\r\n",
        b"CONNECT example.test:443 HTTP/1.1\r\nHost: example.test:443\r\n\r\n",  # a tunnel: not this server's
    ):
        recorder, connection = served(service, data)
        assert not connection.in_progress
        (refusal,) = recorder.writes
        assert refusal.startswith(b"HTTP/1.1 400 Bad Request") and refusal.endswith(
            b'{"error":"malformed request (request)"}'
        )
        assert recorder.closed_after == 1
    assert service.requests == []


def test_a_client_that_expects_100_continue_is_told_to_send_its_body() -> None:
    recorder, _ = served(Told(), (SEND % 2).replace(b"\r\n\r\n", b"\r\nExpect: 100-continue\r\n\r\n"), b"{}")
    assert recorder.writes[0] == b"HTTP/1.1 100 Continue\r\n\r\n"
    assert recorder.writes[1].startswith(b"HTTP/1.1 201 Created")


def test_with_an_access_log_each_answer_is_a_line() -> None:
    """`testbed provider` logs every request."""
    lines: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: lines.append(record.getMessage())  # type: ignore[method-assign]
    access = logging.getLogger("test.access")
    access.addHandler(handler)
    access.setLevel(logging.INFO)
    try:
        served(Told(), SEND % 2 + b"{}", access=access)
    finally:
        access.removeHandler(handler)
    assert lines == ['127.0.0.1:5000 - "POST /ledgers/l/effects HTTP/1.1" 201 Created']


def test_a_connection_is_in_progress_from_a_requests_first_byte_to_its_answer() -> None:
    service = Told()
    _, connection = served(service, b"POST /ledgers/l/effects HTTP/1.1\r\nHost: x\r\n")
    assert connection.in_progress
    _, connection = served(service, SEND % 2 + b"{")
    assert connection.in_progress
    _, connection = served(service, SEND % 2 + b"{}")
    assert not connection.in_progress


def test_an_idle_connection_is_closed_after_its_ticks_and_a_busy_one_is_not() -> None:
    async def ticks() -> tuple[Recorder, Recorder]:
        connections = Connections(Told(), asyncio.get_running_loop())  # type: ignore[arg-type]
        idle, busy = connections(), connections()
        idle_transport, busy_transport = Recorder(), Recorder()
        idle.connection_made(idle_transport)
        busy.connection_made(busy_transport)
        idle.data_received(SEND % 2 + b"{}")
        busy.data_received(SEND % 2 + b"{")
        for _ in range(IDLE_TICKS + 1):
            connections.tick()
        return idle_transport, busy_transport

    idle, busy = asyncio.run(ticks())
    assert idle.closed_after == 1 and busy.closed_after == -1


def test_a_request_not_received_whole_within_its_ticks_is_closed() -> None:
    """A half-sent request holds its connection for REQUEST_TICKS at most: head or body unfinished."""

    async def ticks() -> list[int]:
        connections = Connections(Told(), asyncio.get_running_loop())  # type: ignore[arg-type]
        transports = []
        for data in (b"POST /ledgers/l/effects HTTP/1.1\r\nHost: x\r\n", SEND % 2 + b"{"):
            transport = Recorder()
            connection = connections()
            connection.connection_made(transport)
            connection.data_received(data)
            transports.append(transport)
        seen = []
        for _ in range(REQUEST_TICKS + 1):
            seen.append(sum(t.closed_after >= 0 for t in transports))
            connections.tick()
        return [*seen, sum(t.closed_after >= 0 for t in transports)]

    closed = asyncio.run(ticks())
    assert closed[:-1] == [0] * (REQUEST_TICKS + 1) and closed[-1] == 2


def test_a_head_over_its_size_or_header_count_is_answered_431_and_closed() -> None:
    """Whether its headers are parsed, or one never ends: the parser holds no more than the cap."""
    never_ends = b"POST /ledgers/l/effects HTTP/1.1\r\nX-Big: " + b"x" * 8192
    many = b"GET /health HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % n for n in range(MAX_HEADERS + 1)) + b"\r\n"
    long_url = b"GET /" + b"x" * MAX_HEAD + b" HTTP/1.1\r\n\r\n"
    for chunks in ([never_ends] * (MAX_HEAD // 8192 + 1), [many], [long_url]):
        service = Told()
        recorder, connection = served(service, *chunks)
        (refusal,) = recorder.writes
        assert refusal.startswith(b"HTTP/1.1 431 Request Header Fields Too Large") and recorder.closed_after == 1
        assert service.requests == [] and not connection.in_progress


def test_a_head_just_under_the_caps_fed_byte_by_byte_is_answered() -> None:
    headers = b"".join(b"X-%d: y\r\n" % n for n in range(MAX_HEADERS - 2))
    head = b"GET /health HTTP/1.1\r\nHost: x\r\n" + headers + b"X-Pad: "
    head += b"p" * (MAX_HEAD - len(head) - 4) + b"\r\n\r\n"
    assert len(head) == MAX_HEAD
    service = Told()
    recorder, _ = served(service, *(head[i : i + 1] for i in range(len(head))))
    assert len(service.requests) == 1 and recorder.writes[0].startswith(b"HTTP/1.1 201")
    assert recorder.closed_after == -1


def test_without_the_token_a_body_is_not_kept() -> None:
    """The service refuses such a request from its head alone: it is handed the head, once the body is in."""
    service = Told(needs_token=True)
    recorder, connection = served(service, SEND % 10_000, b"x" * 5_000)
    assert service.requests == [] and recorder.writes == [] and connection.in_progress
    recorder, connection = served(service, SEND % 10_000, b"x" * 5_000, b"x" * 5_000)
    (request,) = service.requests
    assert request.body == b"" and not request.oversized
    assert len(recorder.writes) == 1 and not connection.in_progress
    service = Told(needs_token=True)
    served(service, (SEND % 2).replace(b"Host: x", b"Host: x\r\nAuthorization: Bearer t"), b"{}")
    assert [r.body for r in service.requests] == [b"{}"]


class _Socket:
    family = socket.AF_UNIX


class _Said(Peers):
    """Peers as told: each connection's client is the next one listed."""

    def __init__(self, clients: list[Client]) -> None:
        super().__init__()
        self.clients = clients

    def client(self, sock: socket.socket) -> Client:
        return self.clients.pop(0)


def test_a_client_over_its_share_of_connections_is_answered_503_and_closed() -> None:
    """A stranger past its cap; every stranger past theirs together; everyone past the total. The
    provider's own user only past the total, and a connection closed frees its place. Its own
    user's refusals are the provider's failures (the lab's own links), strangers' are not."""
    own = os.geteuid()
    told = Told()
    clients: list[Client] = [*[own + 1] * 3, *[own + 2] * 2, own + 3, *[own] * 3, own + 1, own]

    async def connect() -> list[int]:
        budget = Budget(total=6, strangers=4, per_client=2)
        peers = _Said(list(clients))
        connections = Connections(told, asyncio.get_running_loop(), budget=budget, peers=peers)  # type: ignore[arg-type]
        refused = []
        made = []
        for n in range(len(clients) - 2):
            transport = Recorder()
            transport._extra["socket"] = _Socket()  # type: ignore[attr-defined]
            connection = connections()
            connection.connection_made(transport)
            made.append(connection)
            if transport.writes:
                assert transport.writes[0].startswith(b"HTTP/1.1 503") and transport.closed_after == 1
                refused.append(n)
                connection.connection_lost(None)
        made[0].connection_lost(None)  # a stranger's first closes: its place is free
        for n in range(len(clients) - 2, len(clients)):
            transport = Recorder()
            transport._extra["socket"] = _Socket()  # type: ignore[attr-defined]
            connections().connection_made(transport)
            if transport.writes:
                refused.append(n)
        return refused

    # 2: the third of one stranger; 5: past all strangers' 4; 8: past the total of 6; then,
    # a place freed: 9 (a stranger under its cap) takes it, and 10 (own) finds the total reached.
    assert asyncio.run(connect()) == [2, 5, 8, 10]
    assert told.failures.count == 2 and "out of descriptors" in str(told.failures.last)


def test_the_budget_keeps_a_reserve_for_the_own_user() -> None:
    budget = Budget.of(20_000)
    assert budget.total < 20_000 and 0 < budget.strangers < budget.total
    assert budget.admits(own=True, total=budget.strangers + 10, strangers=budget.strangers, of_client=0)
    assert not budget.admits(own=False, total=budget.strangers, strangers=budget.strangers, of_client=0)
    assert not budget.admits(own=False, total=0, strangers=0, of_client=budget.per_client)
    assert not budget.admits(own=True, total=budget.total, strangers=0, of_client=0)
    low = Budget.of(1024)  # a low limit: the reserve is half of what there is
    assert low.strangers == low.total - low.total // 2


def test_the_client_of_a_connection_on_this_machine_is_its_user() -> None:
    """Over a unix socket and over loopback TCP alike (the kernel's socket diagnostics)."""
    peers = Peers()
    left, right = socket.socketpair()
    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        assert peers.client(right) == os.geteuid()
        assert peers.client(accepted) == os.geteuid()
    finally:
        for s in (left, right, listener, client, accepted):
            s.close()
        peers.close()


ARMED = Response(201, {"id": "eff_2", "reference": "op-2"})


def _held(data: bytes, while_held: Callable[[Connection, Recorder], None]) -> tuple[Recorder, list[bool]]:
    """A connection whose every request is an armed send, held until `while_held` has looked
    at it (its first request's hold); what was written, and whether a request was in
    progress as each held answer's gate was left."""
    release, done = threading.Event(), []

    def hold() -> Response:
        release.wait(5)
        return ARMED

    connection: Connection

    async def serve() -> Recorder:
        nonlocal connection
        service = Told(lambda: HeldSend(hold, lambda: done.append(connection.in_progress)))
        connection = Connections(service, asyncio.get_running_loop())()  # type: ignore[arg-type]
        recorder = Recorder()
        connection.connection_made(recorder)
        connection.data_received(data)
        await asyncio.sleep(0.01)
        while_held(connection, recorder)
        release.set()
        while not done:
            await asyncio.sleep(0.001)
        return recorder

    return asyncio.run(serve()), done


def test_an_armed_send_is_answered_from_its_thread_the_connection_reading_nothing_meanwhile() -> None:
    """Held at its boundaries in a thread of its own; answered, and the gate left, once the hold ends."""

    def held(connection: Connection, recorder: Recorder) -> None:
        assert recorder.writes == [] and not recorder.reading and connection.in_progress

    recorder, done = _held(SEND % 2 + b"{}", held)
    (answer,) = recorder.writes
    assert answer.startswith(b"HTTP/1.1 201 Created") and answer.endswith(b'{"id":"eff_2","reference":"op-2"}')
    assert recorder.reading and done == [False]  # written, then the gate left; reading again


def test_a_request_pipelined_behind_a_held_send_is_refused_and_the_held_answer_dropped() -> None:
    """No client of the lab's sends one; one that did must not be answered out of order."""
    recorder, done = _held(SEND % 2 + b"{}" + SEND % 2 + b"{}", lambda *_: None)  # the second before an answer
    (refusal,) = recorder.writes
    assert refusal.startswith(b"HTTP/1.1 400 Bad Request") and recorder.closed_after == 1
    assert len(done) == 1  # the held one's gate left all the same
