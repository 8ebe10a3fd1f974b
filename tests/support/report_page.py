"""What the tests check of a report page's timelines, from the run's own results.json."""

from __future__ import annotations

from typing import Any

from testbed.report import reading
from testbed.store import results as stored
from testbed.store.formats import StoredEvent
from tests.support.dom import Node

BAD = ("duplicated", "missing", "held")


def label_of(row: dict[str, Any]) -> str:
    return reading.label(stored.parse_row(row))


def faulted_ops(row: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    history = row.get("history") or {}
    typed = {op: [StoredEvent.model_validate(e) for e in events] for op, events in history.items()}
    return {op: history[op] for op, events in typed.items() if reading.faulted(events)}


def assert_cell_timeline(figure: Node, row: dict[str, Any]) -> None:
    """A cell's timeline as the browser built it: a row per faulted op, bad ops first, each coloured by what
    became of it; on each, a bar per attempt, the fault's hit, every kill as what it killed (a work-horse,
    a worker, the provider) or the host cut off, and the provider's effects at the time it applied them."""
    rows = {r.attrs["data-op"]: r for r in figure.find_all("g", "op-row")}
    faulted = faulted_ops(row)
    assert set(faulted) <= set(rows), (set(faulted) - set(rows), row["strategy"], row["boundary"])
    for op, events in faulted.items():
        drawn = rows[op]
        kinds = [e["event"] for e in events]
        killed = [e for e in events if e["event"] == "killed"]
        assert len(drawn.find_all("g", "attempt")) == kinds.count("attempt-start"), op
        assert len(drawn.find_all("g", "hit")) == kinds.count("hit"), op
        assert len(drawn.find_all("g", "cut")) == kinds.count("partitioned"), op
        by_provider = sum("provider" in e for e in killed)
        whole = sum(len(e.get("pids", ())) > 1 for e in killed)
        assert len(drawn.find_all("g", "provider-kill")) == by_provider, op
        assert len(drawn.find_all("g", "kill-worker")) == whole, op
        assert len(drawn.find_all("g", "kill")) == len(killed) - by_provider - whole, op
    outcomes = [r.attrs["data-outcome"] for r in figure.find_all("g", "op-row")]
    first_good = next((i for i, o in enumerate(outcomes) if o not in BAD), len(outcomes))
    assert all(o not in BAD for o in outcomes[first_good:]), outcomes  # bad ops first
    if figure.attrs["data-provider"] == "none":  # a run kept without its provider's side: no outcome to check
        assert set(outcomes) <= {"unknown", *BAD}, outcomes
        return
    assert outcomes.count("missing") == row["missingOperations"], outcomes
    assert ("duplicated" in outcomes) == (row["duplicateEffects"] > 0), outcomes
    for drawn in rows.values():
        effects = len(drawn.find_all("g", "effect"))
        outcome = drawn.attrs["data-outcome"]
        assert (effects >= 2) if outcome == "duplicated" else (effects == 1) if outcome == "once" else True, drawn.attrs
        if outcome == "missing":
            assert effects == 0, drawn.attrs
