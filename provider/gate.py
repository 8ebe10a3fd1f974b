"""The provider's door: while the lab is about to crash the provider on purpose,
requests are turned away unprocessed instead of dying half-done with it.

A request held at an armed boundary waits outside the count, so a drain never
waits for a hold. While the gate is closed the server accepts no new
connection: one made then waits in the listening socket's backlog, which the
lab holds across the crash, for the provider that follows. The connections
already open are closed as the drain begins, an idle one at once and one with a
request coming once that is answered: a pooled client finds its connection
closed and sends its next request on a new one, which waits in the backlog too.
So no request the plan did not target is answered by the crash. Only one that
comes past all that (on a connection accepted as the drain began) is turned
away with 503 and `Retry-After`: nothing was done with it, and a client may
send it again as it is.

Only jobs' requests pass the gate (the routes `provider.routes` marks gated:
sends and reads of effects, a user's job's scoped routes). `/health` and the controller's own requests (contracts, the
clock, withdrawals, audits) do not: the controller makes the crash itself, so
none of its requests is in flight when it does, and it must reach a restarted
provider that already holds the next armed request behind a closed gate.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class Gate:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = 0  # requests being processed, holds excluded
        self._closed = False
        self._shut = False  # the doors are shut (a drain has begun): the gate closes once it is over
        self._doors: tuple[Callable[[], Callable[[], bool]], Callable[[], None]] | None = None

    def also(self, close: Callable[[], Callable[[], bool]], reopen: Callable[[], None]) -> None:
        """What else shuts while the gate is closed: the server's accepting of new
        connections and its open ones (`provider.server`), whose next requests then wait
        for the next provider in the backlog the lab holds, rather than being turned away.
        `close` says, once they are shut, whether a request that was coming in is still
        to be answered. Called from any thread."""
        self._doors = (close, reopen)

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
        """Shut the doors, wait for the requests coming in or being processed to be answered,
        then turn away whatever comes past the doors."""
        with self._lock:
            self._shut = True
        coming = self._doors[0]() if self._doors is not None else _none
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if self._active <= 0 and not coming():
                    break
            time.sleep(0.001)
        with self._lock:
            self._closed = True

    def reopen(self) -> None:
        with self._lock:
            was, self._shut, self._closed = self._shut, False, False
        if was and self._doors is not None:
            self._doors[1]()


def _none() -> bool:
    return False
