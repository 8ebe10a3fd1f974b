"""What the controller hears of that the plan may not have made (pure): an attempt's
failed call to the provider, a work-horse dead of a signal. What the plan did not
make is an anomaly, in words naming the op and the attempt: the lab's, never the
job's, so its cell's verdict is withheld (`testbed.judge.scorecard.Row.withheld`).
"""

from __future__ import annotations

import signal
from collections.abc import Collection, Iterable

from labcore.answers import CallFailure
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


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"
