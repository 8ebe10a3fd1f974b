"""The provider turns Nagle off on its TCP connections.

uvicorn writes an answer's head and body apart; with Nagle on, the body
waited for the client's delayed ACK, and every request after the first on a
keep-alive connection took 40 ms more (httpx, requests and the work-horse's
client turn it off on their side already). Real sockets on loopback; what is
checked is the socket option itself, not a time.
"""

import asyncio
import socket

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from provider.server import _NoDelay


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
    assert _accepted_nodelay(_NoDelay)


def test_asyncio_alone_leaves_nagle_on_for_such_a_socket():
    """Why the provider has to: asyncio turns Nagle off only for a socket that names IPPROTO_TCP."""
    assert not _accepted_nodelay(HttpToolsProtocol)
