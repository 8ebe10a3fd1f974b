"""A live progress line for long runs: rewritten in place on a terminal,
an occasional line otherwise."""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from testbed.lab.runner import Progress


class LiveLine:
    def __init__(self, stream: TextIO = sys.stderr, every: float | None = None) -> None:
        self._stream = stream
        self._tty = stream.isatty()
        self._every = every if every is not None else (0.5 if self._tty else 10.0)
        self._last = 0.0

    def __call__(self, running: list[Progress]) -> None:
        now = time.monotonic()
        if now - self._last < self._every or not running:
            return
        self._last = now
        text = "   ".join(_describe(p) for p in running)
        if self._tty:
            self._stream.write("\r\x1b[2K" + text)
        else:
            self._stream.write(text + "\n")
        self._stream.flush()

    def clear(self) -> None:
        if self._tty:
            self._stream.write("\r\x1b[2K")
            self._stream.flush()


def _describe(p: Progress) -> str:
    rate = p.over / p.elapsed if p.elapsed > 0 else 0.0
    return (
        f"{p.cell.strategy}: {p.over:,}/{p.jobs:,} jobs, {p.kills:,} kills, {rate:.0f} jobs/s, "
        f"{int(p.elapsed) // 60}m{int(p.elapsed) % 60:02d}s"
    )
