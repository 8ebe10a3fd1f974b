"""The bare server: the least any server does per connection and request (it answers
every request with a fixed 201), the provider's stand-in where a benchmark measures
what no provider could cost less than."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

# The baseline server: the least any server does per connection and request.
BARE = r"""
import asyncio, sys
ANSWER = b'HTTP/1.1 201 Created\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}'
class Bare(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
    def data_received(self, data):
        if b'\r\n\r\n' in data:  # the client sends head and body in one write
            self.transport.write(ANSWER)
async def main():
    await asyncio.get_running_loop().create_unix_server(Bare, sys.argv[1])
    print('ready', flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

# The floor's server (`floor_job`): the bare server, on the provider's event loop.
FLOOR_SERVER = "import asyncio, uvloop\nasyncio.set_event_loop_policy(uvloop.EventLoopPolicy())\n" + BARE


@contextmanager
def floor_server(work: Path) -> Iterator[tuple[psutil.Process, str]]:
    """The floor's bare server on a unix socket: its process, its URL."""
    from labcore.endpoints import unix_url
    from labcore.procs import stop_all

    path = work / "floor.sock"
    server = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, str(path)], stdout=subprocess.PIPE)
    try:
        if server.stdout is None or server.stdout.readline() != b"ready\n":
            raise SystemExit("the floor's server did not start")
        yield psutil.Process(server.pid), unix_url(path)
    finally:
        stop_all([server])
