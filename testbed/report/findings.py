"""What a run found, in words: the one source of what the terminal, `testbed
check`, the report page and JUnit say about each cell and each op (pure).

Per cell (`cell_findings`): what its outcome was and what its verdict means
("as expected (model): 10 duplicated" for a passing cell whose outcome is
bad, so that a pass never reads as "safe"), and one line per op worth naming:
each op that breaks a user's job's promise, each op whose facts differ from
the model's, each op the worker holds (unresolved or in conflict) with its
reason. Per run (`summary`): which strategies and handlers (on Celery, under
which delivery setting) duplicate work, lose it (silently, when their jobs
reported success), hold ops unresolved, where and under which faults, and
which are exactly-once.

Everything is read from results.json's rows (`ResultRow`), so a stored run
and the run that made it say the same words.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from labcore.boundaries import NONE
from labcore.delivery import named
from testbed.judge.checker import OUTCOME_WORDS
from testbed.store.results import OpDifference, ResultRow


class Kind(StrEnum):
    """What an op line says of its op."""

    DUPLICATED = "duplicated"
    MISSING = "missing"
    DIFFERS = "differs"  # its facts differ from the model's
    UNRESOLVED = "unresolved"
    CONFLICT = "conflict"


@dataclass(frozen=True, slots=True)
class OpLine:
    op: str
    kind: Kind
    text: str  # the whole line, op first


@dataclass(frozen=True, slots=True)
class CellFindings:
    label: str
    subject: str  # the strategy, or the user's job as given
    passed: bool
    outcome: str  # in words: "exactly once", "10 duplicated, 2 unresolved", ...
    verdict: str  # in words: "as expected", "as expected (model): 10 duplicated", "DIFFERS: ..."
    problems: list[str]  # why the cell differs (empty when it passed)
    ops: list[OpLine]

    @property
    def worth_naming(self) -> bool:
        """A cell the listings show: it differs, or it names ops."""
        return not self.passed or bool(self.ops)


def _plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def bad_outcome(row: ResultRow) -> list[str]:
    """The cell's bad outcomes in words, worst first; empty for exactly once."""
    parts = []
    if row.duplicate_effects:
        parts.append(_plural(row.duplicate_effects, "extra effect"))
    if row.missing_operations:
        silent = f" ({_plural(row.false_completions, 'false completion')})" if row.false_completions else ""
        parts.append(f"{row.missing_operations} missing{silent}")
    if row.unresolved:
        parts.append(f"{row.unresolved} unresolved")
    if row.conflicts:
        parts.append(_plural(row.conflicts, "conflict"))
    if row.failed_by_provider:
        parts.append(f"{row.failed_by_provider} failed by the provider")
    return parts


def _verdict(row: ResultRow, outcome: list[str]) -> str:
    if row.withheld:
        return "WITHHELD"
    if not row.passed:
        return "DIFFERS"
    if not outcome:
        return "as expected"
    if row.promise is not None:  # a user's job: its promise allowed what happened
        return f"as expected ({row.promise.promise} holds): {', '.join(outcome)}"
    judged = "--expect" if row.expected and _overridden(row) else "model"
    return f"as expected ({judged}): {', '.join(outcome)}"


def _overridden(row: ResultRow) -> bool:
    # The user's own expectation is stored as effects and missing only; the model's holds every count.
    return set(row.expected) <= {"effects", "missingOperations"}


def op_difference_text(op: OpDifference) -> str:
    """One op whose facts differ from the model's: what was planned for it, and each fact expected and observed."""
    plan = ", ".join(f"attempt {p.attempt} {p.fault} at {p.boundary}" for p in op.plan) or "no fault"
    changed = [
        f"{k} {op.expected.get(k)} expected, {op.observed.get(k)} observed"
        for k in dict.fromkeys([*op.expected, *op.observed])
        if op.observed.get(k) != op.expected.get(k)
    ]
    return f"{op.op} ({plan}): " + ("; ".join(changed) or "differs")


def _op_lines(row: ResultRow) -> list[OpLine]:
    lines = []
    if row.promise is not None:
        for breaking in row.promise.ops:
            lines.append(OpLine(breaking.op, Kind(breaking.breach), str(breaking)))
    for op in row.op_differences or ():
        lines.append(OpLine(op.op, Kind.DIFFERS, op_difference_text(op)))
    for held in row.held:
        kind = Kind.CONFLICT if held.state == Kind.CONFLICT else Kind.UNRESOLVED
        lines.append(OpLine(held.op, kind, f"{held.op}: held {held.state}: {held.reason}"))
    return lines


def cell_findings(row: ResultRow) -> CellFindings:
    outcome = bad_outcome(row)
    return CellFindings(
        label=row.label,
        subject=row.strategy,
        passed=row.passed,
        outcome=", ".join(outcome) or OUTCOME_WORDS["once"],
        verdict=_verdict(row, outcome),
        problems=list(row.differences),
        ops=_op_lines(row),
    )


def listing(rows: Iterable[ResultRow], per_cell: int = 10) -> str:
    """The cells worth naming, each with its verdict and its first ops: what the terminal and
    `testbed check` print under the tables."""
    lines = []
    for found in map(cell_findings, rows):
        if not found.worth_naming:
            continue
        if found.passed:
            lines.append(f"{found.label}: {found.verdict}")
        else:
            word = "WITHHELD" if found.verdict == "WITHHELD" else "DIFFERS"
            lines.append(f"{word}  {found.label}: {'; '.join(found.problems) or found.outcome}")
        lines += [f"    {op.text}" for op in found.ops[:per_cell]]
        if len(found.ops) > per_cell:
            lines.append(f"    ... {len(found.ops) - per_cell} more in the results file")
    return "\n".join(lines)


# ---------------------------------------------------------------- the run in a few sentences


def _place(row: ResultRow) -> str:
    if row.shape is not None:  # a trial: its schedule's shape, as its label says it
        return row.label.partition(" @ ")[2]
    where = row.boundary if row.boundary != NONE else "no fault"
    fault = "" if row.boundary == NONE else f" ({row.fault})"
    scenario = "" if row.scenario == "none" else f", scenario {row.scenario}"
    return f"{where}{fault}{scenario}"


def _tally(rows: Sequence[ResultRow], count: Callable[[ResultRow], int], what: tuple[str, str]) -> str:
    """`10 extra effects at after-effect (kill), 3 at before-effect (timeout)`: `what` in the
    singular and the plural, said once, after the first number."""
    first, *rest = rows
    n = count(first)
    said = [f"{n} {what[n != 1]} at {_place(first)}"]
    return ", ".join(said + [f"{count(r)} at {_place(r)}" for r in rest])


def _subject(row: ResultRow) -> tuple[str, str]:
    """Who a sentence is about: a strategy or handler, and on Celery the delivery setting it ran
    under (the same strategy under four settings is four subjects)."""
    return (row.delivery or "", row.strategy)


def summary(rows: Sequence[ResultRow]) -> list[str]:
    """One sentence per strategy or handler (per Celery delivery setting), in the order they ran:
    what it did to the work."""
    sentences = []
    judged = [r for r in rows if not r.withheld]  # a withheld cell says nothing of its strategy
    for key in dict.fromkeys(map(_subject, judged)):
        mine = [r for r in judged if _subject(r) == key]
        delivery, strategy = key
        subject = f"{named(delivery)}: {strategy}" if delivery else strategy
        said = []
        if duplicating := [r for r in mine if r.duplicate_effects]:
            extra = _tally(duplicating, lambda r: r.duplicate_effects, ("extra effect", "extra effects"))
            said.append(f"duplicates work ({extra})")
        if silent := [r for r in mine if r.false_completions]:
            lost = _tally(silent, lambda r: r.missing_operations, ("op missing", "ops missing"))
            said.append(f"loses work silently ({lost}, their jobs reporting success)")
        if losing := [r for r in mine if r.missing_operations and not r.false_completions]:
            lost = _tally(losing, lambda r: r.missing_operations, ("op missing", "ops missing"))
            said.append(f"loses work ({lost})")
        if holding := [r for r in mine if r.unresolved or r.conflicts]:
            held = _tally(holding, lambda r: r.unresolved + r.conflicts, ("op", "ops"))
            said.append(f"holds ops unresolved, never counted as done ({held})")
        faulted = sum(r.injected for r in mine)
        if said:
            sentences.append(f"{subject} " + "; ".join(said) + ".")
        elif faulted:
            sentences.append(f"{subject} is exactly-once in every cell ({faulted} faulted, {len(mine) - faulted} not).")
        else:
            sentences.append(
                f"{subject} lost and repeated no work, but no fault struck it ({_plural(len(mine), 'cell')})."
            )
    if withheld := len(rows) - len(judged):
        sentences.append(
            f"{_plural(withheld, 'cell')} withheld, judged neither way: the lab saw what the plan did not make."
        )
    return sentences


def words(rows: Sequence[ResultRow]) -> str:
    """What the terminal and `testbed check` print under the tables: the run in a few
    sentences, then the cells worth naming with their ops."""
    named = listing(rows)
    return "\n".join(summary(rows)) + (f"\n\n{named}" if named else "")
