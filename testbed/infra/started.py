"""A process the stack starts beside Redis and the provider, of a kind it does not know (an
engine's own server, the user's destination sandbox): in a session of its own (a Ctrl-C
reaches only the lab, which stops it in order) and killed by the kernel if the lab dies
without cleaning up, its output to its log, waited for until it is ready, watched like the
other parts (a death during the run is named: PartDied, exit 3) and stopped with every
process it started."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from labcore.procs import guarded, spawn, stop_all, stop_session
from testbed.errors import SetupError
from testbed.infra.liveness import check_alive, last_line

# Says why the part is not ready yet, or None once it is.
Readiness = Callable[[], str | None]


class StartedPart:
    """`name` as errors name it; `ready` says when it is ready, `waited_for` what that is (as the
    errors say it), `within` how long it has by default."""

    def __init__(
        self, name: str, argv: Sequence[str], log: Path, ready: Readiness, waited_for: str, within: float
    ) -> None:
        self.name = name
        self.log = log
        self._argv = tuple(argv)
        self._ready = ready
        self._waited_for = waited_for
        self._within = within
        self._proc: subprocess.Popen[bytes] | None = None

    def launch(self) -> None:
        self._proc = spawn(guarded(self._argv), self.log)

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def wait_ready(self, timeout: float | None = None) -> None:
        """Until it is ready; SetupError naming it if it exits first, or is not ready within
        `timeout` (default: its own)."""
        assert self._proc is not None, "launched first"
        within = self._within if timeout is None else timeout
        deadline = time.monotonic() + within
        while True:
            if (code := self._proc.poll()) is not None:
                last = last_line(self.log)
                raise SetupError(f"{self.name} exited (exit {code}) before {self._waited_for}; last log line: {last}")
            why = self._ready()
            if why is None:
                return
            if time.monotonic() > deadline:
                raise SetupError(f"{self.name} did not {self._waited_for} within {within:.0f} s ({why})")
            time.sleep(0.05)

    def check(self) -> None:
        check_alive(self.name, self._proc, self.log)

    def stop(self) -> None:
        """It and every process it started: those below it, then what is left in its session."""
        if self._proc is None:
            return
        proc, self._proc = self._proc, None
        stop_all([proc])
        stop_session(proc.pid)
