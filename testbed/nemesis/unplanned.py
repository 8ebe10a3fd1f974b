"""What the controller hears of that the plan may not have made (pure): an attempt's
failed call to the provider, a work-horse dead of a signal, a kill that found its
attempt already ended. What the plan did not make, or could not carry out, is an
anomaly, in words naming the op and the attempt: the lab's, never the job's, so its
cell's verdict is withheld (`testbed.judge.scorecard.Row.withheld`).
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Iterable

from labcore.answers import CallFailure
from labcore.boundaries import Boundary
from labcore.events import Event, EventKind
from labcore.faults import RULES, Fault
from labcore.plan import Armed

_FAILED = {
    CallFailure.TIMEOUT: "its client timed out on the provider",
    CallFailure.CONNECTION: "its call to the provider broke",
    CallFailure.STATUS: "the provider answered it",
}


def unplanned_call(
    op: str, attempt: int, armed: Iterable[Armed], faults: Iterable[Fault], failure: CallFailure, detail: str
) -> str | None:
    """The anomaly an attempt's failed call is, or None if the plan made it. `armed`: its
    op's plan; `faults`: its cell's. A cell that crashes the provider or cuts the network
    may fail any of its calls (the cell runs alone for it); an attempt whose request the
    plan holds at the provider may see its client give up; nothing else fails a call."""
    if any(RULES[f].alone for f in faults):
        return None
    held = any(a.attempt == attempt and a.boundary.on_provider for a in armed)
    if failure is CallFailure.TIMEOUT and held:
        return None
    return f"{op} attempt {attempt}: {_FAILED[failure]} ({detail}) where the plan made no fault"


def unplanned_death(op: str, attempt: int, pid: int, signum: int, killed: Collection[tuple[str, int]]) -> str | None:
    """The anomaly a work-horse's death by a signal is, or None if the controller killed it
    (`killed`: the (op, pid) of every kill it made in the cell; pids of other ops may be reused)."""
    if (op, pid) in killed:
        return None
    where = f"{op} attempt {attempt}" if attempt else f"{op} before its first attempt"  # it had counted none
    return (
        f"{where}: its work-horse (pid {pid}) died of {_signal_name(signum)} with no kill"
        " of the plan (killed from outside the lab: the OOM killer, a kill -9)"
    )


def unplanned_timeout(op: str, attempt: int, detail: str, killed: Collection[tuple[str, int]]) -> str | None:
    """The anomaly an engine's own timeout of an attempt is (`detail`: the engine's words), or
    None if the controller killed that attempt (`killed`: the (op, attempt) of every attempt it
    killed in the cell): a killed attempt is noticed only when its timeout expires."""
    if (op, attempt) in killed:
        return None
    where = f"{op} attempt {attempt}" if attempt else f"{op} before its first attempt"
    return f"{where}: {detail} with no kill of the plan (the machine is too slow for that timeout: raise it)"


# An attempt's reports that say it has ended, or is ending, the likeliest cause first.
ENDINGS = (EventKind.CALL_FAILED, EventKind.CALL_TIMEOUT, EventKind.ATTEMPT_END)


def stranded_kill(op: str, attempt: int, boundary: Boundary, pid: int, reports: Iterable[Event]) -> str:
    """The anomaly a kill is whose work-horse had already exited (reaped by its worker):
    the attempt ended before the lab reached it, as the first of its `reports` (of that
    attempt, among ENDINGS) says; its work-horse's exit says so where none does."""
    ending = min(reports, key=lambda e: ENDINGS.index(e.kind), default=None)
    why = f"its work-horse (pid {pid}) had exited" if ending is None else _ended(ending)
    return (
        f"{op} attempt {attempt}: the attempt ended before the kill at {boundary.value} ({why}), so the"
        " kill reached nobody; the lab's hold must stay inside the job's client timeout (raise it there)"
    )


def _ended(report: Event) -> str:
    if report.kind is EventKind.CALL_FAILED:
        failure = CallFailure(report.data["failure"])
        said = "its client gave up on the provider" if failure is CallFailure.TIMEOUT else _FAILED[failure]
        return f"{said}: {report.data['detail']}"
    if report.kind is EventKind.CALL_TIMEOUT:
        return "its client gave up on the provider"
    return f"it ended: {report.data.get('outcome', '?')} {report.data.get('error', '')}".rstrip()


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
