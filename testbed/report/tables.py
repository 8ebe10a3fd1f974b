"""What a run prints: the article-style tables.

The tables are built from rows of either kind: the run's `Row` objects, or
the rows of a stored results.json (`testbed.store.results.ResultRow`). Both go
through the same grid (which cells, in which order, under which title) and
the same cell text, so a report drawn from a stored run shows what the run
printed.
"""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

from labcore.boundaries import NONE, ORDER, boundary_label
from labcore.delivery import caption
from testbed.experiment.scenarios import SCENARIOS
from testbed.judge.checker import OUTCOME_WORDS
from testbed.judge.scorecard import Row
from workers.strategies import STRATEGIES

if TYPE_CHECKING:
    from testbed.store.results import ResultRow

# What a mark after a cell's `effects / missing` means. `l` is counted at the run's end, once
# every work-horse has: a cell's line as it is judged does not have it yet.
MARKS = {
    "u": "unresolved",
    "c": "conflicts",
    "f": OUTCOME_WORDS["declined"],
    "j": "jobs failed",
    "l": "processes the jobs left running after their attempts, stopped",
}
DIFFERS = "!"


def left_said(count: int) -> str:
    """A cell's leftover processes in words, where a line says them (replay, JUnit, the report's tooltip)."""
    return f"{count} {MARKS['l']}"


# Load cells draw their boundary per fault: one column after the named ones.
RANDOM = "random"
COLUMN_ORDER = (NONE, *(b.value for b in ORDER), RANDOM)

T = TypeVar("T")
# What places a row in a table: (strategy, boundary label, fault, scenario, Celery delivery setting or "").
CellKey = tuple[str, str, str, str, str]


def _cell_text(
    effects: int, missing: int, unresolved: int, conflicts: int, failed: int, jobs: int, left: int, passed: bool
) -> str:
    text = f"{effects} / {missing}"
    counted = ((unresolved, "u"), (conflicts, "c"), (failed, "f"), (jobs, "j"), (left, "l"))
    marks = [f"{n}{m}" for n, m in counted if n]
    if marks:
        text += f" ({' '.join(marks)})"
    return text if passed else f"{text} {DIFFERS}"


def legend(texts: Iterable[str]) -> str:
    """What the marks in these cells' texts mean; empty when no cell has one."""
    used: set[str] = set()
    differs = False
    for text in texts:
        differs |= text.endswith(f" {DIFFERS}")
        if "(" in text:
            used |= {mark[-1] for mark in text[text.index("(") + 1 : text.index(")")].split()}
    parts = [f"N{m} {MARKS[m]}" for m in MARKS if m in used]
    said = [f"marks: {', '.join(parts)}"] if parts else []
    said += [f"{DIFFERS} differs from expectation"] if differs else []
    return "; ".join(said)


def cell_text(row: Row) -> str:
    c = row.counts
    return _cell_text(
        c.effects,
        c.missing_operations,
        c.unresolved,
        c.conflicts,
        c.failed_by_provider,
        c.jobs_failed,
        row.leftovers,
        row.passed,
    )


def stored_cell_text(row: ResultRow) -> str:
    """`cell_text` of a row of a stored results.json."""
    return _cell_text(
        row.effects,
        row.missing_operations,
        row.unresolved,
        row.conflicts,
        row.failed_by_provider,
        row.jobs_failed,
        row.leftover_processes,
        row.passed,
    )


def row_key(row: Row) -> CellKey:
    c = row.cell
    return (c.strategy, boundary_label(c.boundary), c.fault.value, c.scenario, c.delivery or "")


def stored_row_key(row: ResultRow) -> CellKey:
    return (row.strategy, row.boundary, row.fault, row.scenario, row.delivery or "")


@dataclass(frozen=True, slots=True)
class Grid(Generic[T]):
    """One table: strategies down, boundaries across, for one fault and scenario (and Celery setting)."""

    fault: str
    scenario: str
    delivery: str  # the Celery delivery setting; "" on RQ
    title: str
    columns: list[str]
    strategies: list[str]
    cells: dict[tuple[str, str], T]  # (strategy, column) -> row

    def at(self, strategy: str, column: str) -> T | None:
        return self.cells.get((strategy, column))


def grids(rows: Sequence[T], key: Callable[[T], CellKey]) -> list[Grid[T]]:
    """One grid per (Celery setting, scenario, fault); the control column (no fault) joins
    every grid of its scenario and setting."""
    keyed = [(key(r), r) for r in rows]
    controls = [(k, r) for k, r in keyed if k[1] == NONE]
    groups: dict[tuple[str, str, str], list[tuple[CellKey, T]]] = {}
    for k, r in keyed:
        if k[1] != NONE:
            groups.setdefault((k[4], k[3], k[2]), []).append((k, r))
    for k, _ in controls:  # a setting with controls alone still has its table
        if not any(g[0] == k[4] for g in groups):
            groups[(k[4], k[3], "kill")] = []
    out = []
    for (delivery, scenario, fault), group in groups.items():
        members = group + [(k, r) for k, r in controls if (k[4], k[3]) == (delivery, scenario)]
        # Every boundary its cells name, in the lab's order: one it does not know (a schedule's) after them,
        # never dropped (a grid without it would be drawn with none of its cells' values).
        present = list(dict.fromkeys(k[1] for k, _ in members))
        columns = [c for c in COLUMN_ORDER if c in present] + [c for c in present if c not in COLUMN_ORDER]
        named = {k[0] for k, _ in members}
        strategies = [s for s in STRATEGIES if s in named] + sorted(named - set(STRATEGIES))
        cells = {(k[0], k[1]): r for k, r in members}
        out.append(Grid(fault, scenario, delivery, grid_title(fault, scenario, delivery), columns, strategies, cells))
    return out


def grid_title(fault: str, scenario: str, delivery: str) -> str:
    """`kill`, `kill, scenario withdrawn: ...`, `celery acks-late (...): kill`: what a table of
    these cells is called, wherever the run's cells are shown in groups."""
    title = fault if scenario == "none" else f"{fault}, scenario {scenario}: {_summary(scenario)}"
    return f"{caption(delivery)}: {title}" if delivery else title


def _summary(scenario: str) -> str:
    known = SCENARIOS.get(scenario)
    return known.summary if known else scenario


def grid_text(grid: Grid[T], text: Callable[[T], str]) -> str:
    """A grid as the article's text table, under its title."""
    lines = [["strategy", *grid.columns]]
    for strategy in grid.strategies:
        found = [grid.at(strategy, column) for column in grid.columns]
        lines.append([strategy, *(text(r) if r is not None else "-" for r in found)])
    return "\n".join([grid.title, *aligned(lines)])


def aligned(grid: list[list[str]]) -> list[str]:
    widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
    return ["  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip() for line in grid]


def run_caption(ops: int, every: int, retries: int) -> str:
    """What a run's tables were made of: `100 ops per cell, first attempt of every 10th op faulted, 1 retry`."""
    nth = "" if every == 1 else f"{every}{_ordinal_suffix(every)} "
    plural = "retry" if retries == 1 else "retries"
    return f"{ops} ops per cell, first attempt of every {nth}op faulted, {retries} {plural}"


def _ordinal_suffix(n: int) -> str:
    return "th" if n % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")


def tables(rows: Sequence[Row], ops_note: str) -> str:
    """One table per (scenario, fault): strategies x boundaries, `effects / missing`, and what their marks mean."""
    tables = [f"effects / missing; {ops_note}", *(grid_text(g, cell_text) for g in grids(rows, row_key))]
    marks = legend(cell_text(r) for r in rows)
    return "\n\n".join(tables + ([marks] if marks else []))


_ANOMALIES_SHOWN = 3  # per cell as it is judged; results.json has them all


def progress_line(index: int, total: int, row: Row) -> str:
    """A cell as it is judged, marked as its table cell will be."""
    verdict = "WITHHELD" if row.withheld else "as expected" if row.passed else "DIFFERS"
    width = len(str(total))
    shown = cell_text(row).removesuffix(" !")
    line = f"[{index:>{width}}/{total}] {row.cell.label:<56} {shown:<16} {verdict:<11} {row.wall_seconds:5.2f} s"
    return "\n".join([line, *(f"    anomaly: {text}" for text in row.anomalies[:_ANOMALIES_SHOWN])])


LOAD_HEADER = ["strategy", "effects", "dup", "missing", "unresolved", "false-done", "kills", "attempts/s", "verdict"]


def _load_line(row: ResultRow) -> list[str]:
    """One strategy's line of the load table, from a row's stored fields."""
    wall = row.wall_seconds
    rate = (row.intended + row.replays) / wall if wall else 0.0
    counts = (
        row.effects,
        row.duplicate_effects,
        row.missing_operations,
        row.unresolved,
        row.false_completions,
        row.kills,
    )
    verdict = "holds" if row.passed else "BROKEN"
    return [row.strategy, *(str(n) for n in counts), f"{rate:.0f}", verdict]


LEFT = "left"  # the load table's column of processes the jobs left running, where any did


def load_grid(rows: Sequence[ResultRow]) -> list[list[str]]:
    """The load table's header and lines, for rows of a stored results.json; with a column of
    the processes each strategy's jobs left running after their attempts (stopped), where any did."""
    lines = [LOAD_HEADER, *(_load_line(r) for r in rows)]
    if not any(r.leftover_processes for r in rows):
        return lines
    left = [LEFT, *(str(r.leftover_processes) for r in rows)]
    return [[*line[:-1], n, line[-1]] for line, n in zip(lines, left, strict=True)]


def load_table(rows: Sequence[Row], note: str) -> str:
    """One line per strategy: what the provider recorded, what the strategy promises, and how fast."""
    from testbed.store.results import parse_row, row_json

    stored = [parse_row(row_json(r) | {"wallSeconds": r.wall_seconds}) for r in rows]
    said = [f"{LEFT}: {MARKS['l']}"] if any(r.leftovers for r in rows) else []
    return "\n".join([f"load: {note}", *aligned(load_grid(stored)), *said])


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
