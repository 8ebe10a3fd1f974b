"""What the plan did not make: which failed calls and dead work-horses are anomalies, and a kill
whose attempt had already ended; and how a cell that saw one is withheld (the row, the words,
the run's failure)."""

from __future__ import annotations

import signal

from labcore.answers import CallFailure, provider_failed
from labcore.boundaries import Boundary
from labcore.events import Event, EventKind
from labcore.faults import Fault, Release
from labcore.keys import CellKeys
from labcore.plan import Armed, EveryNth
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import SCENARIOS
from testbed.judge.checker import Counts
from testbed.judge.scorecard import Expected, Row
from testbed.lab.options import RunOptions, every_nth
from testbed.lab.session import Ran, client_timeouts, withheld
from testbed.nemesis.controller import Controller
from testbed.nemesis.kills import HorseGone, Kill
from testbed.nemesis.unplanned import stranded_kill, unplanned_call, unplanned_death, unplanned_timeout
from testbed.report import findings
from testbed.store.results import parse_row, row_json
from tests.unit import test_controller

TIMEOUT_ARMED = (Armed(1, Boundary.BEFORE_EFFECT, Fault.TIMEOUT),)


def test_a_timeout_where_nothing_is_armed_is_an_anomaly_naming_the_op_and_attempt() -> None:
    text = unplanned_call("op-3", 1, (), {Fault.KILL}, CallFailure.TIMEOUT, "ReadTimeout")
    assert text == "op-3 attempt 1: its client timed out on the provider (ReadTimeout) where the plan made no fault"


def test_a_timeout_of_an_attempt_whose_request_the_plan_holds_is_planned() -> None:
    assert unplanned_call("op-10", 1, TIMEOUT_ARMED, {Fault.TIMEOUT}, CallFailure.TIMEOUT, "x") is None
    late = (Armed(1, Boundary.BEFORE_EFFECT, Fault.LATE),)
    assert unplanned_call("op-10", 1, late, {Fault.LATE}, CallFailure.TIMEOUT, "x") is None
    # Its retry is not held: a timeout there is nobody's plan.
    assert unplanned_call("op-10", 2, TIMEOUT_ARMED, {Fault.TIMEOUT}, CallFailure.TIMEOUT, "x") is not None
    # Nor is a kill at a worker-side boundary a hold at the provider.
    kill = (Armed(1, Boundary.BEFORE_REQUEST, Fault.KILL),)
    assert unplanned_call("op-10", 1, kill, {Fault.KILL}, CallFailure.TIMEOUT, "x") is not None


def test_a_broken_call_or_a_5xx_is_an_anomaly_even_on_a_held_attempt() -> None:
    broke = unplanned_call("op-10", 1, TIMEOUT_ARMED, {Fault.TIMEOUT}, CallFailure.CONNECTION, "ConnectionResetError")
    assert broke is not None and "its call to the provider broke (ConnectionResetError)" in broke
    answered = unplanned_call("op-1", 1, (), (), CallFailure.STATUS, "503")
    assert answered is not None and "the provider answered it (503)" in answered


def test_in_a_cell_that_crashes_the_provider_or_cuts_the_network_any_call_may_fail() -> None:
    for fault in (Fault.PROVIDER_CRASH, Fault.PARTITION):
        for failure in CallFailure:
            assert unplanned_call("op-4", 1, (), {fault}, failure, "x") is None


def test_which_answers_say_the_provider_failed() -> None:
    assert [s for s in (200, 201, 400, 404, 409, 410, 500, 501, 502, 503, 504) if provider_failed(s)] == [
        500,
        502,
        503,
        504,
    ]  # 501 is a contract's "no lookup here"


def test_a_death_is_planned_only_for_a_pid_the_controller_killed_for_that_op() -> None:
    killed = {("op-10", 99)}
    assert unplanned_death("op-10", 1, 99, signal.SIGKILL, killed) is None
    text = unplanned_death("op-3", 2, 99, signal.SIGKILL, killed)  # the pid, reused by another op's horse
    assert text is not None and text.startswith("op-3 attempt 2: its work-horse (pid 99) died of SIGKILL")
    assert "with no kill of the plan" in text
    assert "died of signal 99" in (unplanned_death("op-3", 1, 5, 99, killed) or "")
    early = unplanned_death("op-3", 0, 5, signal.SIGKILL, killed)  # killed before it counted its attempt
    assert early is not None and early.startswith("op-3 before its first attempt: its work-horse (pid 5)")


def _event(kind: EventKind, op: str, pid: int, **data: object) -> Event:
    return Event(kind, "c001", op, 1, pid, "w1", 2.0, dict(data))


def test_the_controller_marks_the_cell_for_an_unplanned_death_not_for_its_own_kill() -> None:
    controller, _, hit = test_controller.setup(Fault.KILL, Boundary.AFTER_RECEIPT)
    controller.handle(hit)  # kills pid 99, t:op:10's work-horse
    controller.handle(_event(EventKind.HORSE_DIED, "t:op:10", 99, signal=9))
    controller.handle(_event(EventKind.HORSE_DIED, "op-4", 123, signal=9))
    seen = controller.finish("c001")
    assert len(seen.anomalies) == 1 and seen.anomalies[0].startswith("op-4 attempt 1: its work-horse (pid 123)")
    assert "op-4" not in seen.history  # said by the anomaly, not kept as a watched op's history


def test_the_controller_judges_a_failed_call_against_the_cells_plan() -> None:
    controller, _, _ = test_controller.setup(Fault.TIMEOUT, Boundary.BEFORE_EFFECT)
    controller.handle(_event(EventKind.CALL_FAILED, "tenant:notification:10", 5, failure="timeout", detail="t"))
    controller.handle(_event(EventKind.CALL_FAILED, "tenant:notification:3", 5, failure="timeout", detail="t"))
    (anomaly,) = controller.finish("c001").anomalies
    assert anomaly.startswith("tenant:notification:3 attempt 1: its client timed out")


class _Late(test_controller.FakeBus):
    """A bus with what the work-horse reported still on it, behind the hit."""

    def __init__(self, log: list[tuple[object, ...]], ahead: list[Event]) -> None:
        super().__init__(log)
        self.ahead = ahead

    def pending(self) -> list[Event]:
        return self.ahead


class _TooLate(test_controller.FakeKiller):
    def kill(self, horse_pid: int, whole_worker: bool, worker: str = "") -> Kill[test_controller.FakeWorker]:
        raise HorseGone(horse_pid)


_GAVE_UP = {"failure": "timeout", "detail": "ReadTimeout: Read timed out. (read timeout=0.01)"}


def _stranding(heard: list[Event], ahead: list[Event]) -> tuple[list[str], list[tuple[object, ...]], str, int]:
    """A kill at after-effect of t:op:10 whose work-horse was gone: the anomalies, what was done, the hit."""
    log: list[tuple[object, ...]] = []
    controller = Controller(_Late(log, ahead), _TooLate(log), test_controller.FakeWorld(log))  # type: ignore[arg-type]
    plan = EveryNth(10, Boundary.AFTER_EFFECT, Fault.KILL)
    controller.begin("c001", "ledger", plan, SCENARIOS["none"], CellKeys("k"))
    _, _, hit = test_controller.setup(Fault.KILL, Boundary.AFTER_EFFECT)
    for event in heard:
        controller.handle(event)
    controller.handle(hit)
    seen = controller.finish("c001")
    return seen.anomalies, log, hit.hit, seen.kill_count


def test_a_kill_whose_attempt_had_ended_says_how_it_ended_and_lets_the_op_go_on() -> None:
    heard = [_event(EventKind.CALL_FAILED, "t:op:10", 99, **_GAVE_UP), _event(EventKind.ATTEMPT_END, "t:op:10", 99)]
    for before, after in [(heard, []), ([], heard), (heard[1:], heard[:1])]:  # heard before the hit, or still queued
        (anomaly,), log, hit, kills = _stranding(before, after)
        assert anomaly == (
            "t:op:10 attempt 1: the attempt ended before the kill at after-effect (its client gave up on the"
            " provider: ReadTimeout: Read timed out. (read timeout=0.01)), so the kill reached nobody; the"
            " lab's hold must stay inside the job's client timeout (raise it there)"
        )
        assert log == [("release", hit, Release.RESPOND), ("settle", hit)] and kills == 0  # as after a kill, unmade


def test_a_kill_whose_attempt_ended_unheard_says_its_work_horse_had_exited() -> None:
    other = Event(EventKind.CALL_FAILED, "c001", "t:op:10", 2, 98, "w2", 2.0, _GAVE_UP)  # another attempt's
    (anomaly,), _, _, _ = _stranding([], [other, _event(EventKind.CALL_FAILED, "t:op:3", 97, **_GAVE_UP)])
    assert "(its work-horse (pid 99) had exited), so the kill reached nobody" in anomaly
    ended = stranded_kill(
        "op-1",
        2,
        Boundary.AFTER_RECEIPT,
        5,
        [_event(EventKind.ATTEMPT_END, "op-1", 5, outcome="error", error="ValueError")],
    )
    assert "at after-receipt (it ended: error ValueError)" in ended


def _row(anomalies: list[str]) -> Row:
    return Row(
        Cell("retry-only", None),
        Counts(effects=2, duplicate_effects=1),
        0,
        0,
        4,
        0.1,
        Expected({}),
        [],
        None,
        anomalies,
    )


def test_a_row_with_an_anomaly_is_withheld_and_says_nothing_of_its_strategy() -> None:
    stored = parse_row(row_json(_row(["op-3 attempt 1: its work-horse (pid 7) died of SIGKILL"])))
    assert stored.verdict == "withheld" and stored.withheld and not stored.passed
    assert findings.cell_findings(stored).verdict == "WITHHELD"
    assert findings.summary([stored]) == [
        "1 cell withheld, judged neither way: the lab saw what the plan did not make."
    ]
    assert findings.listing([stored]).startswith("WITHHELD  retry-only @ none: op-3 attempt 1: its work-horse")
    judged = parse_row(row_json(_row([])))
    assert judged.verdict == "pass" and findings.summary([judged])[0].startswith("retry-only duplicates work")


def test_a_withheld_cell_ends_the_run_as_the_labs_failure() -> None:
    ran = withheld(Ran([_row([]), _row(["op-3 attempt 1: the provider answered it (500)"])]))
    assert ran.failure == (
        "verdict withheld, the lab saw what the plan did not make: 1 cell(s) withheld;"
        " retry-only @ none: op-3 attempt 1: the provider answered it (500)"
    )
    assert withheld(Ran([_row([])])).failure is None
    assert withheld(Ran([_row(["x"])], "the provider died")).failure == "the provider died"  # the first failure


def test_the_runs_first_line_says_the_client_timeouts_and_which_to_raise() -> None:
    builtin = RunOptions([Cell("retry-only", None)], every_nth(10), client_timeout=0.25)
    assert (
        client_timeouts(builtin)
        == "client timeout 0.25 s where a fault is armed to time out (--client-timeout), 60 s elsewhere"
    )
    users = RunOptions([Cell("myjob:send", None, handler="myjob:send")], every_nth(10))
    assert client_timeouts(users).endswith("; a user's job's client keeps its own timeout (raise it there)")


def test_an_engines_own_timeout_is_an_anomaly_unless_the_plan_killed_that_attempt() -> None:
    said = "Temporal ran its activity again (its attempt 2) before the one in hand ended"
    assert unplanned_timeout("t:op:3", 1, said, {("t:op:3", 1)}) is None  # killed: noticed at its timeout
    text = unplanned_timeout("t:op:3", 2, said, {("t:op:3", 1)})
    assert (
        text
        == f"t:op:3 attempt 2: {said} with no kill of the plan (the machine is too slow for that timeout: raise it)"
    )
    assert unplanned_timeout("t:op:4", 0, said, set()) == (
        f"t:op:4 before its first attempt: {said} with no kill of the plan"
        " (the machine is too slow for that timeout: raise it)"
    )
