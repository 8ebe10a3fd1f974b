"""When the provider's SIGTERM may end it at once: no request in progress (provider.server).

The immediate end closes the store first. A held send whose client has gone
away is still in progress until it is settled: its thread goes on using the
store, and its key must end applied or dropped, not cut off mid-transaction."""

from __future__ import annotations

import asyncio
import threading

from provider.connection import Connections
from provider.service import HeldSend, Request, Response

SEND = b"POST /ledgers/l/effects HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


class Holding:
    """A service whose every request is an armed send, held until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.settled = threading.Event()

    def handle(self, request: Request) -> HeldSend:
        def run() -> Response:
            self.release.wait(5)
            return Response(201, {})

        return HeldSend(run, self.settled.set)

    def reads_body(self, request: Request) -> bool:
        return True


def test_a_held_send_whose_client_went_away_is_in_progress_until_settled() -> None:
    service = Holding()

    async def scenario() -> list[bool]:
        connections = Connections(service, asyncio.get_running_loop())  # type: ignore[arg-type]
        connection = connections()
        transport = _Transport()
        connection.connection_made(transport)
        connection.data_received(SEND)
        seen = [connections.in_progress()]
        transport.close()
        connection.connection_lost(None)  # the client is gone; its send is still held
        seen.append(connections.in_progress())
        service.release.set()
        while not service.settled.is_set():
            await asyncio.sleep(0.001)
        seen.append(connections.in_progress())
        seen.append(bool(connections.open))
        return seen

    assert asyncio.run(scenario()) == [True, True, False, False]


def test_an_idle_server_has_nothing_in_progress() -> None:
    async def scenario() -> bool:
        connections = Connections(Holding(), asyncio.get_running_loop())  # type: ignore[arg-type]
        connections().connection_made(_Transport())
        return connections.in_progress()

    assert asyncio.run(scenario()) is False


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self._closing = False

    def write(self, data: bytes) -> None:  # type: ignore[override]
        pass

    def close(self) -> None:
        self._closing = True

    def is_closing(self) -> bool:
        return self._closing

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass
