"""A provider process of its own for a test: started with a token in its environment, as the lab starts it."""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from labcore.credentials import TOKEN_ENV, bearer, new_secret
from labcore.procs import free_port, stop


@dataclass
class Standalone:
    db: Path
    port: int = field(default_factory=free_port)
    token: str = field(default_factory=new_secret)
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return bearer(self.token)

    def start(self) -> Standalone:
        argv = [sys.executable, "-m", "provider", "--port", str(self.port), "--db", str(self.db)]
        with open(self.db.with_suffix(".log"), "ab") as log:
            self.proc = subprocess.Popen(
                argv, env={**os.environ, TOKEN_ENV: self.token}, stdout=log, stderr=subprocess.STDOUT
            )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        with httpx.Client(trust_env=False, timeout=1.0) as http:
            while time.monotonic() < deadline:
                assert self.proc.poll() is None, self.db.with_suffix(".log").read_text()
                with contextlib.suppress(httpx.TransportError):
                    if http.get(f"{self.url}/health").status_code == 200:
                        return
                time.sleep(0.02)
        raise AssertionError(f"provider did not come up on {self.url}")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, as a crash."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> int | None:
        if self.proc is None:
            return None
        stop(self.proc)
        return self.proc.returncode

    def client(self, timeout: float = 10.0) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.auth, trust_env=False, timeout=timeout)

    def rows(self, table: str) -> int:
        """Rows of a table of the log, read as another process would."""
        with contextlib.closing(sqlite3.connect(f"file:{self.db}?mode=ro", uri=True)) as conn:
            count: int = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
            return count
