"""The provider's door: while the lab is about to crash the provider on purpose,
requests are turned away unprocessed instead of dying half-done with it.

A request held at an armed boundary waits outside the count, so a drain never
waits for a hold. A request turned away gets 503 with `Retry-After`: nothing
was done with it, and a client may send it again as it is.

Only jobs' requests pass the gate (sends and reads of effects, a user's job's
scoped routes). `/health` and the controller's own requests (contracts, the
clock, withdrawals, audits) do not: the controller makes the crash itself, so
none of its requests is in flight when it does, and it must reach a restarted
provider that already holds the next armed request behind a closed gate.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from labcore.answers import RETRY_AFTER, UNPROCESSED

_BODY = json.dumps({"error": "the provider is restarting; the request was not processed"}).encode()


class Gate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0  # requests being processed, holds excluded
        self._closed = False

    def enter(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._active += 1
            return True

    def leave(self) -> None:
        with self._lock:
            self._active -= 1

    def hold(self) -> None:
        """The calling request waits at a boundary: it does not count as processing."""
        self.leave()

    def resume(self) -> None:
        with self._lock:
            self._active += 1

    def close_and_drain(self, timeout: float = 5.0) -> None:
        """Turn new requests away and wait for those being processed to finish."""
        with self._lock:
            self._closed = True
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._active <= 0:
                    return
            time.sleep(0.001)

    def reopen(self) -> None:
        with self._lock:
            self._closed = False


def gated(path: str) -> bool:
    """A job's request: `/ledgers/{ledger}/effects[/{reference}]` (not a withdrawal) or `/s/...`."""
    if path.startswith("/s/"):
        return True
    parts = path.split("/")  # "", "ledgers", ledger, "effects", ...
    return len(parts) >= 4 and parts[1] == "ledgers" and parts[3] == "effects" and not path.endswith("/withdraw")


class GateMiddleware:
    """ASGI: every job's HTTP request passes the gate (`gated`)."""

    def __init__(self, app: Any, gate: Gate) -> None:
        self._app = app
        self._gate = gate

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or not gated(scope["path"]):
            await self._app(scope, receive, send)
            return
        if not self._gate.enter():
            headers = [(b"content-type", b"application/json"), (RETRY_AFTER.encode(), b"1")]
            await send({"type": "http.response.start", "status": UNPROCESSED, "headers": headers})
            await send({"type": "http.response.body", "body": _BODY})
            return
        try:
            await self._app(scope, receive, send)
        finally:
            self._gate.leave()
