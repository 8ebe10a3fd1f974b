"""The destinations' sandboxes the end-to-end tests start (moto's server, localstripe,
stripe-stateful-mock), as a user would: on a free port, waited for until they answer."""

from __future__ import annotations

import os
import subprocess
import time

import httpx


class Sandbox:
    """A sandbox as a user would start it, on a free port, until it answers; stopped by the test."""

    def __init__(self, argv: list[str], port: int, env: dict[str, str]) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.proc = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(self.url, timeout=1)
                return
            except httpx.HTTPError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise AssertionError(f"{argv[0]} did not start") from None
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
