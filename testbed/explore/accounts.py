"""A trial in words: what its schedule armed, and what happened to each attempt of
each op, one line per op, from what the run saw (pure).

    op 1: attempt 1 killed at before-request; attempt 2 killed at after-effect;
    attempt 3 completed: 2 effects from 2 requests, job finished: duplicated

Built from a trial's row, live (`Row`) or stored (`ResultRow`): its
schedule, each op's facts (`opFacts`), each watched op's events and the ops
that break its promise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.judge.scorecard import Row

_STRUCK = {
    Fault.KILL: "killed at {}",
    Fault.KILL_WORKER: "killed with its worker at {}",
    Fault.TIMEOUT: "timed out at {}",
    Fault.LATE: "timed out at {}, its request applied later",
    Fault.PROVIDER_CRASH: "lost in a provider crash at {}",
    Fault.HOLD: "held at {} while a duplicate of the op ran",
    Fault.PARTITION: "cut off from the provider at {}",
}


def armed_text(a: Armed) -> str:
    return f"{a.fault} at {a.boundary}"


def schedule_lines(schedule: Schedule) -> list[str]:
    """The schedule alone, as armed: one line per op."""
    head = f"scenario {schedule.scenario}, {schedule.retries} retr{'y' if schedule.retries == 1 else 'ies'}"
    lines = [head]
    for n, op in enumerate(schedule.ops, 1):
        faults = "; ".join(f"attempt {a.attempt}: {armed_text(a)}" for a in op) or "no fault"
        lines.append(f"op {n}: {faults}")
    return lines


def trial_lines(
    schedule: Schedule,
    op_facts: Sequence[Mapping[str, Any]],
    history: Mapping[str, Sequence[Mapping[str, Any]]],
    breaches: Sequence[Mapping[str, Any]] = (),
) -> list[str]:
    """What happened to each op of a trial, one line each."""
    return [
        _op_line(n, schedule.armed(n), facts, history.get(str(facts.get("op")), ()), breaches)
        for n, facts in enumerate(op_facts, 1)
    ]


def _op_line(
    n: int,
    armed: Sequence[Armed],
    facts: Mapping[str, Any],
    events: Sequence[Mapping[str, Any]],
    breaches: Sequence[Mapping[str, Any]],
) -> str:
    attempts = int(facts.get("attempts", 0))
    hits = {int(e["attempt"]): e for e in events if e.get("event") == "hit"}
    ends = {int(e["attempt"]): e for e in events if e.get("event") == "attempt-end"}
    parts = []
    for number in range(1, attempts + 1):
        parts.append(f"attempt {number} {_attempt(number, hits, ends, armed, facts, number == attempts)}")
    effects = int(facts.get("effects", 0))
    account = f"{effects} effect{'s' * (effects != 1)} from {facts.get('sends', 0)} request"
    account += "s" * (facts.get("sends") != 1)
    if facts.get("withdrawn"):
        account += f" ({facts['withdrawn']} withdrawn)"
    if facts.get("declined"):
        account += ", declined by the provider"
    job = "failed" if facts.get("jobFailed") else "finished" if facts.get("outcome") else "not over"
    line = f"op {n}: " + ("; ".join(parts) or "never ran") + f": {account}, job {job}"
    breach = next((b["breach"] for b in breaches if str(b.get("op", "")).endswith(f":{facts.get('op')}")), None)
    return line + (f": {breach}" if breach else "")


def _attempt(
    number: int,
    hits: Mapping[int, Mapping[str, Any]],
    ends: Mapping[int, Mapping[str, Any]],
    armed: Sequence[Armed],
    facts: Mapping[str, Any],
    last: bool,
) -> str:
    hit = hits.get(number)
    if hit is not None:
        struck = _STRUCK[Fault(hit["fault"])].format(hit["boundary"])
        if Fault(hit["fault"]) is not Fault.HOLD:
            return struck
        end = ends.get(number)
        return struck + (f", then {_ended(end)}" if end else "")
    text = _ended(ends[number]) if number in ends else str(facts.get("outcome") or "ran") if last else "ran"
    missed = [armed_text(a) for a in armed if a.attempt == number]
    return text + (f" (armed: {missed[0]}, not reached)" if missed else "")


def _ended(end: Mapping[str, Any]) -> str:
    """How an attempt ended; the receipt of one that completed is left out, the reason of one held kept."""
    outcome = str(end.get("outcome", ""))
    detail = "" if outcome in _DONE else end.get("detail") or end.get("error") or ""
    return outcome + (f" ({detail})" if detail else "")


_DONE = ("completed", "reconciled")


def row_lines(row: Row) -> list[str]:
    """A trial's row: its label, then each op's line."""
    assert row.cell.schedule is not None
    promise = row.promise or {}
    verdict = "as expected" if row.passed else "; ".join(row.problems)
    lines = trial_lines(row.cell.schedule, row.op_facts or [], row.history or {}, promise.get("ops", []))
    return [f"{row.cell.label}: {verdict}", *(f"  {line}" for line in lines)]
