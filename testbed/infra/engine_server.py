"""A server of an engine's own that the run's stack starts beside Redis and the provider
(Temporal's dev server), as the engine describes it (`base.ServerCommand`): its command
line, run so that it dies with the run, and the port it answers on once ready. A death
during the run is named (PartDied: exit 3)."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from labcore.procs import guarded, spawn
from testbed.engines.base import ServerCommand
from testbed.errors import SetupError
from testbed.infra.liveness import check_alive, last_line


class EngineServer:
    def __init__(self, command: ServerCommand, workdir: Path) -> None:
        self._command = command
        directory = workdir / "engine-server"
        directory.mkdir(mode=0o700)
        self.log = directory / "server.log"
        self._proc: subprocess.Popen[bytes] | None = spawn(guarded(command.argv), self.log)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Until it takes connections on its port."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check()
            try:
                with socket.create_connection(("127.0.0.1", self._command.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise SetupError(f"{self._command.name} did not start within {timeout:.0f} s: {last_line(self.log)}")

    def check(self) -> None:
        check_alive(self._command.name, self._proc, self.log)

    def release(self) -> list[subprocess.Popen[bytes]]:
        """Hand it over to be stopped."""
        procs = [] if self._proc is None else [self._proc]
        self._proc = None
        return procs
