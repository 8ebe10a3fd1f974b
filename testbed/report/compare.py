"""Two results documents side by side: the cells whose counts or verdicts
differ, their replay latency changes, and the cells only one of them has (pure)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from testbed.judge.scorecard import latency_stats
from testbed.report import reading
from testbed.report.latency import replay_latency
from testbed.report.tables import CellKey, stored_row_key
from testbed.store.results import ResultRow, Results

# A matched cell whose counts agree is still listed when its median replay latency changes by this factor.
LATENCY_FACTOR = 2.0


@dataclass(frozen=True, slots=True)
class Change:
    name: str
    a: Any
    b: Any


@dataclass(frozen=True, slots=True)
class CellChange:
    key: CellKey  # (strategy, boundary, fault, scenario)
    label: str
    status: str  # changed | latency | only-a | only-b
    verdicts: tuple[str | None, str | None]
    counts: list[Change] = field(default_factory=list)
    latency: list[Change] = field(default_factory=list)  # ms: replay / requeue, median / p99


def compare(a: Results, b: Results, *, latency_factor: float | None = LATENCY_FACTOR) -> list[CellChange]:
    """Cells matched by (strategy, boundary, fault, scenario): those that differ, then those in one only."""
    rows_a, rows_b = _rows(a), _rows(b)
    out: list[CellChange] = []
    for key, (row_a, lat_a) in rows_a.items():
        if key not in rows_b:
            out.append(CellChange(key, reading.label(row_a), "only-a", (row_a.verdict, None)))
            continue
        row_b, lat_b = rows_b[key]
        counts_a, counts_b = row_a.counts(), row_b.counts()
        counts = [Change(f, n, counts_b[f]) for f, n in counts_a.items() if n != counts_b[f]]
        verdicts: tuple[str | None, str | None] = (row_a.verdict, row_b.verdict)
        latency = _latency_changes(lat_a, lat_b)
        if counts or verdicts[0] != verdicts[1]:
            status = "changed"
        elif latency_factor is not None and _moved(lat_a, lat_b, latency_factor):
            status = "latency"
        else:
            continue
        out.append(CellChange(key, reading.label(row_a), status, verdicts, counts, latency))
    for key, (row_b, _) in rows_b.items():
        if key not in rows_a:
            out.append(CellChange(key, reading.label(row_b), "only-b", (None, row_b.verdict)))
    return out


Latencies = dict[str, Mapping[str, float] | None]  # "replay" / "requeue" -> min / median / p99 / max


def _rows(results: Results) -> dict[CellKey, tuple[ResultRow, Latencies]]:
    out: dict[CellKey, tuple[ResultRow, Latencies]] = {}
    for row, history in zip(results.rows, reading.histories(results), strict=True):
        spans = [s for s in (replay_latency(events) for events in history.values()) if s is not None]
        requeue = latency_stats([s.requeue_ms for s in spans if s.requeue_ms is not None])
        # the run's own kill-to-replay figures; from the events when the row has none
        stored = row.replay_latency_ms.model_dump() if row.replay_latency_ms is not None else None
        replay = stored or latency_stats([s.replay_ms for s in spans if s.replay_ms is not None])
        out[stored_row_key(row)] = (row, {"replay": replay, "requeue": requeue})
    return out


def _latency_changes(a: Latencies, b: Latencies) -> list[Change]:
    out = []
    for span in ("replay", "requeue"):
        sa, sb = a.get(span), b.get(span)
        if sa is None and sb is None:
            continue
        for stat in ("median", "p99"):
            va, vb = (sa or {}).get(stat), (sb or {}).get(stat)
            if va != vb:
                out.append(Change(f"{span} {stat}", va, vb))
    return out


def _moved(a: Latencies, b: Latencies, factor: float) -> bool:
    ma, mb = (a.get("replay") or {}).get("median"), (b.get("replay") or {}).get("median")
    if ma is None or mb is None:
        return (ma is None) != (mb is None)
    low, high = sorted((ma, mb))
    return high > low * factor if low > 0 else high > 0


def in_common(a: Results, b: Results) -> int:
    """How many cells the two runs share (by strategy, boundary, fault and scenario)."""
    return len({stored_row_key(r) for r in a.rows} & {stored_row_key(r) for r in b.rows})


def render_text(changes: Sequence[CellChange], a_name: str = "A", b_name: str = "B", common: int | None = None) -> str:
    """What `testbed compare` prints; `common`: the cells the runs share, where known."""
    changed = [c for c in changes if c.status in ("changed", "latency")]
    only_a = [c for c in changes if c.status == "only-a"]
    only_b = [c for c in changes if c.status == "only-b"]
    head = f"{a_name} -> {b_name}: "
    if not changes:
        return head + "every cell shows the same counts and verdict"
    if common == 0:
        return head + (
            f"no cell in common, nothing to compare ({len(only_a)} cell(s) only in {a_name},"
            f" {len(only_b)} only in {b_name})"
        )
    lines = [head + f"{len(changed)} cell(s) differ, {len(only_a)} only in {a_name}, {len(only_b)} only in {b_name}"]
    for c in changed:
        verdict = f"verdict {c.verdicts[0]} -> {c.verdicts[1]}" if c.verdicts[0] != c.verdicts[1] else ""
        lines.append(f"{c.label}  {verdict}".rstrip())
        if c.counts:
            lines.append("    " + "; ".join(f"{x.name} {x.a} -> {x.b}" for x in c.counts))
        if c.latency:
            lines.append("    " + "; ".join(f"{x.name} {_ms(x.a)} -> {_ms(x.b)}" for x in c.latency))
    lines += [f"only in {a_name}: {c.label} ({c.verdicts[0]})" for c in only_a]
    lines += [f"only in {b_name}: {c.label} ({c.verdicts[1]})" for c in only_b]
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f} ms"
