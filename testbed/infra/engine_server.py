"""A server of an engine's own that the run's stack starts beside Redis and the provider
(Temporal's dev server), as the engine describes it (`base.ServerCommand`): a started part
(`started`) ready once it takes connections on its port."""

from __future__ import annotations

import socket
from pathlib import Path

from testbed.engines.base import ServerCommand
from testbed.infra.started import StartedPart

READY_WITHIN = 30.0  # seconds the server has to take connections


def engine_server(command: ServerCommand, workdir: Path) -> StartedPart:
    directory = workdir / "engine-server"
    directory.mkdir(mode=0o700)
    port = command.port

    def takes_connections() -> str | None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return None
        except OSError as exc:
            return f"{type(exc).__name__}: {exc}"

    return StartedPart(
        command.name,
        command.argv,
        directory / "server.log",
        takes_connections,
        f"take connections on port {port}",
        READY_WITHIN,
    )
