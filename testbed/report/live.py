"""Live progress of a run: on a terminal, rich's live display (a bar per running
cell: jobs over of jobs, kills, rate, elapsed); otherwise a plain line every
few seconds. Cells print their line as they are judged, above the display.

The display is made at its first update, once the run has launched its
processes: rich's import would otherwise come before the launch,
and hold back the provider's start, on which the first cell waits."""

from __future__ import annotations

import time
from types import TracebackType
from typing import TYPE_CHECKING

from testbed.report.tables import progress_line

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress, TaskID

    from testbed.judge.scorecard import Row
    from testbed.lab.runner import Progress as CellProgress

# Without a terminal, a line this often (a CI log wants a heartbeat, not a flood).
PLAIN_EVERY = 10.0


class Live:
    def __init__(self, console: Console | None = None, plain_every: float = PLAIN_EVERY) -> None:
        self._given = console
        self._console: Console | None = None
        self._tasks: dict[str, TaskID] = {}
        self._plain_every = plain_every
        self._last_plain = time.monotonic()
        self._bars: Progress | None = None

    def __enter__(self) -> Live:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        """Gone before anything else is printed (an error, Ctrl-C, the tables)."""
        if self._bars is not None:
            self._bars.stop()

    def _shown(self) -> Console:
        """The console, and on a terminal the bars, started by the display's first update."""
        if self._console is None:
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._console = self._given or Console(stderr=True, highlight=False)
            if self._console.is_terminal:
                self._bars = Progress(
                    TextColumn("{task.description}"),
                    BarColumn(),
                    MofNCompleteColumn(),
                    TextColumn("jobs, {task.fields[kills]} kills, {task.fields[rate]} jobs/s"),
                    TimeElapsedColumn(),
                    console=self._console,
                    transient=True,
                )
                self._bars.start()
        return self._console

    def judged(self, index: int, total: int, row: Row) -> None:
        self._shown().print(progress_line(index, total, row), markup=False, soft_wrap=True)
        if self._bars is not None and (task := self._tasks.pop(row.cell.label, None)) is not None:
            self._bars.remove_task(task)

    def tick(self, running: list[CellProgress]) -> None:
        console = self._shown()
        if self._bars is None:
            self._plain(console, running)
            return
        for p in running:
            kills, rate = f"{p.kills:,}", f"{_rate(p):.0f}"
            task = self._tasks.get(p.cell.label)
            if task is None:
                task = self._bars.add_task(p.cell.label, total=p.jobs, completed=p.over, kills=kills, rate=rate)
                self._tasks[p.cell.label] = task
            else:
                self._bars.update(task, total=p.jobs, completed=p.over, kills=kills, rate=rate)

    def _plain(self, console: Console, running: list[CellProgress]) -> None:
        now = time.monotonic()
        if now - self._last_plain < self._plain_every or not running:
            return
        self._last_plain = now
        for p in (p for p in running if p.elapsed >= 1):  # a cell just started has nothing to say yet
            console.print(
                f"{p.cell.label}: {p.over:,}/{p.jobs:,} jobs, {p.kills:,} kills, {_rate(p):.0f} jobs/s,"
                f" {int(p.elapsed) // 60}m{int(p.elapsed) % 60:02d}s",
                markup=False,
                soft_wrap=True,
            )


def _rate(p: CellProgress) -> float:
    return p.over / p.elapsed if p.elapsed > 0 else 0.0
