"""What a run prints and stores: the article-style tables and results.json."""

from __future__ import annotations

import json
import resource
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from labcore.boundaries import NONE, ORDER, boundary_label
from testbed.experiment.scenarios import SCENARIOS
from testbed.judge.promises import OpReport
from testbed.judge.scorecard import Row
from workers.strategies import STRATEGIES

LEGEND = "marks: Nu unresolved, Nc conflicts, Nf failed by provider, Nj jobs failed; ! differs from expectation"
# Ops listed under a row that breaks its promise (all of them are in the results file).
LISTED_OPS = 10


def cell_text(row: Row) -> str:
    c = row.counts
    text = f"{c.effects} / {c.missing_operations}"
    counted = ((c.unresolved, "u"), (c.conflicts, "c"), (c.failed_by_provider, "f"), (c.jobs_failed, "j"))
    marks = [f"{n}{m}" for n, m in counted if n]
    if marks:
        text += f" ({' '.join(marks)})"
    return text if row.passed else text + " !"


def tables(rows: Sequence[Row], ops_note: str) -> str:
    """One table per (scenario, fault): strategies x boundaries, `effects / missing`."""
    return "\n\n".join([f"effects / missing; {ops_note}", *_tables(rows)])


def _tables(rows: Sequence[Row]) -> list[str]:
    controls = [r for r in rows if r.cell.boundary is None]
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        if row.cell.boundary is not None:
            groups.setdefault((row.cell.scenario, row.cell.fault.value), []).append(row)
    if not groups and controls:
        groups[("none", "kill")] = []
    out = []
    for (scenario, fault), group in groups.items():
        members = group + [r for r in controls if r.cell.scenario == scenario]
        columns = [NONE] if any(r.cell.boundary is None for r in members) else []
        columns += [b.value for b in ORDER if any(r.cell.boundary is b for r in members)]
        strategies = [s for s in STRATEGIES if any(r.cell.strategy == s for r in members)]
        strategies += list(dict.fromkeys(r.cell.strategy for r in members if r.cell.handler))
        by_key = {(r.cell.strategy, boundary_label(r.cell.boundary)): r for r in members}
        title = fault if scenario == "none" else f"{fault}, scenario {scenario}: {SCENARIOS[scenario].summary}"
        grid = [["strategy", *columns]]
        for strategy in strategies:
            cells = [by_key.get((strategy, column)) for column in columns]
            grid.append([strategy, *(cell_text(r) if r else "-" for r in cells)])
        widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
        lines = ["  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip() for line in grid]
        out.append("\n".join([title, *lines]))
    return out


def differences(rows: Sequence[Row]) -> str:
    lines = []
    for row in rows:
        if not row.passed:
            details = "; ".join(row.problems)
            lines.append(f"DIFFERS  {row.cell.label}: {details}")
            listed = row.extra.get("promise", {}).get("ops", [])
            lines += [f"    {OpReport.from_dict(op)}" for op in listed[:LISTED_OPS]]
            if len(listed) > LISTED_OPS:
                lines.append(f"    ... {len(listed) - LISTED_OPS} more listed in the results file")
    return "\n".join(lines)


def write_results(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> None:
    document = {**meta, "verdict": "pass" if all(r.passed for r in rows) else "fail"}
    document["rows"] = [r.to_json() for r in rows]
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=2) + "\n")
    tmp.replace(path)


def load_table(rows: Sequence[Row], note: str) -> str:
    """One line per strategy: what the provider recorded, what the strategy promises, and how fast."""
    grid = [["strategy", "effects", "dup", "missing", "unresolved", "false-done", "kills", "attempts/s", "verdict"]]
    for row in rows:
        c = row.counts
        rate = (c.intended + c.replays) / row.wall_seconds if row.wall_seconds else 0.0
        verdict = "holds" if row.passed else "BROKEN"
        grid.append(
            [row.cell.strategy]
            + [str(n) for n in (c.effects, c.duplicate_effects, c.missing_operations, c.unresolved)]
            + [str(c.false_completions), str(row.kills), f"{rate:.0f}", verdict]
        )
    widths = [max(len(line[i]) for line in grid) for i in range(len(grid[0]))]
    lines = ["  ".join(text.ljust(w) for text, w in zip(line, widths, strict=True)).rstrip() for line in grid]
    return "\n".join([f"load: {note}", *lines])


def peak_rss_mb() -> float:
    """This process's peak resident memory (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)
