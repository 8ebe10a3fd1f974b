"""Run the provider as its own long-lived process."""

from __future__ import annotations

import socket
from pathlib import Path

import uvicorn
from redis import Redis

from labcore.bus import Bus
from labcore.keys import RunKeys
from labcore.procs import die_with_parent
from provider.app import create_app
from provider.buses import RunBuses
from provider.gate import Gate, GateMiddleware
from provider.holds import Holds
from provider.store import Store


def serve(
    port: int,
    db: Path,
    host: str = "127.0.0.1",
    bus_url: str | None = None,
    bus_prefix: str | None = None,
    parent_pid: int | None = None,
    token: str | None = None,
    sock: socket.socket | None = None,
    access_log: bool = False,
) -> None:
    """`bus_url` (with the Redis password) and `token` come from the caller's
    environment, never from a command line: see labcore.credentials. With
    `sock`, serve on that bound socket (the caller chose and named the port)."""
    die_with_parent(parent_pid)
    store = Store(db)
    bus: Bus | RunBuses | None = None
    if bus_url:
        # Without a prefix the provider serves any run on that Redis: each armed request names its run.
        bus = Bus(Redis.from_url(bus_url), RunKeys(bus_prefix)) if bus_prefix else RunBuses(Redis.from_url(bus_url))
    gate = Gate()
    app = GateMiddleware(create_app(store, Holds(bus, gate), token), gate)
    level = "info" if access_log else "warning"
    config = uvicorn.Config(app, host=host, port=port, log_level=level, access_log=access_log, http="httptools")
    try:
        uvicorn.Server(config).run(sockets=[sock] if sock is not None else None)
    finally:
        store.close()
