"""Watching the parts of a stack: a part that dies outside the plan is named."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable
from pathlib import Path

from labcore.procs import Process
from testbed.errors import RunFailure


class PartDied(RunFailure):
    """Redis, the provider or a worker died, and nobody planned it."""


# After a failed call, or a part's death that another's may have caused, how long a dying part is
# given to show as dead: a SIGKILLed process closes its sockets before its parent can reap it.
DEATH_SHOWS_WITHIN = 1.0
_LOOK_EVERY = 0.05


def shows_dead(check: Callable[[], None], within: float = DEATH_SHOWS_WITHIN) -> None:
    """Raises `check`'s PartDied if a part is dead or shows as dead within `within` seconds."""
    deadline = time.monotonic() + within
    while True:
        check()
        if time.monotonic() >= deadline:
            return
        time.sleep(_LOOK_EVERY)


def check_alive(name: str, proc: Process | None, log: Path) -> None:
    if proc is None or (code := proc.poll()) is None:
        return
    how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
    raise PartDied(f"{name} (pid {proc.pid}) died during the run ({how}); last log line: {last_line(log)}")


def last_line(log: Path) -> str:
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return "(no log)"
    return lines[-1][:200] if lines else "(no output)"


def stopped(parts: dict[str, int | None]) -> list[str]:
    """The parts (name: pid) stopped by a signal (SIGSTOP, a debugger), neither running nor dead."""
    import psutil

    names = []
    for name, pid in parts.items():
        try:
            if pid is not None and psutil.Process(pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                names.append(f"{name} (pid {pid})")
        except psutil.Error:
            continue
    return names
