"""A trial in words, what it found, its coverage, and how the report and JUnit show an exploration (pure)."""

import xml.etree.ElementTree as ET

from labcore.boundaries import Boundary
from labcore.faults import Fault
from labcore.plan import Armed
from labcore.schedule import Schedule
from testbed.experiment.matrix import Cell
from testbed.explore.accounts import schedule_lines, trial_lines
from testbed.explore.coverage import Coverage
from testbed.explore.trials import Found, found_in
from testbed.judge.checker import Counts
from testbed.judge.scorecard import Expected, Row
from testbed.report.explore import counterexample_section, coverage_section, coverage_text, summary_text
from testbed.report.junit import junit
from testbed.store.results import parse

B, F = Boundary, Fault
OP = "tenant-demo:notification:1"
SCHEDULE = Schedule(((Armed(1, B.BEFORE_REQUEST, F.KILL), Armed(2, B.AFTER_EFFECT, F.TIMEOUT)), ()), "none", 3)
HISTORY = {
    OP: [
        {"event": "attempt-start", "at": 1.0, "attempt": 1},
        {"event": "hit", "at": 1.1, "attempt": 1, "boundary": "before-request", "fault": "kill"},
        {"event": "killed", "at": 1.2, "attempt": 1},
        {"event": "hit", "at": 1.5, "attempt": 2, "boundary": "after-effect", "fault": "timeout"},
        {"event": "attempt-end", "at": 2.0, "attempt": 2, "outcome": "error", "error": "Timeout"},
        {"event": "attempt-end", "at": 3.0, "attempt": 3, "outcome": "completed", "detail": "eff_9"},
    ]
}
FACTS = [
    {"op": OP, "attempts": 3, "effects": 2, "sends": 2, "outcome": "completed", "jobFailed": False},
    {"op": "tenant-demo:notification:2", "attempts": 1, "effects": 1, "sends": 1, "outcome": "completed"},
]


def test_each_op_in_one_line_from_what_the_run_saw() -> None:
    breaches = [{"op": f"run.e1c001:{OP}", "breach": "duplicated"}]
    assert trial_lines(SCHEDULE, FACTS, HISTORY, breaches) == [
        "op 1: attempt 1 killed at before-request; attempt 2 timed out at after-effect; attempt 3 completed:"
        " 2 effects from 2 requests, job finished: duplicated",
        "op 2: attempt 1 completed: 1 effect from 1 request, job finished",
    ]


def test_an_armed_fault_its_attempt_never_reached_is_said_so() -> None:
    schedule = Schedule(((Armed(1, B.BEFORE_EFFECT, F.KILL), Armed(2, B.AFTER_RECORD, F.KILL)),), "none", 3)
    history = {
        OP: [
            {"event": "hit", "at": 1.0, "attempt": 1, "boundary": "before-effect", "fault": "kill"},
            {"event": "attempt-end", "at": 2.0, "attempt": 2, "outcome": "skipped", "detail": ""},
        ]
    }
    facts = [{"op": OP, "attempts": 2, "effects": 0, "sends": 1, "outcome": "skipped"}]
    (line,) = trial_lines(schedule, facts, history)
    assert line == (
        "op 1: attempt 1 killed at before-effect; attempt 2 skipped (armed: kill at after-record, not reached):"
        " 0 effects from 1 request, job finished"
    )
    assert schedule_lines(schedule) == [
        "scenario none, 3 retries",
        "op 1: attempt 1: kill at before-effect; attempt 2: kill at after-record",
    ]


def test_coverage_counts_what_was_armed_and_what_struck() -> None:
    coverage = Coverage()
    coverage.add(SCHEDULE, HISTORY)
    coverage.add(Schedule(((Armed(1, B.BEFORE_REQUEST, F.KILL),),), "none", 3), {})
    assert coverage.to_json() == [
        {"attempt": 1, "boundary": "before-request", "fault": "kill", "armed": 2, "struck": 1},
        {"attempt": 2, "boundary": "after-effect", "fault": "timeout", "armed": 1, "struck": 1},
    ]


def explored(counterexample: bool, reproduced: int = 3) -> dict[str, object]:
    coverage = Coverage()
    coverage.add(SCHEDULE, HISTORY)
    found = {
        "found": "breach",
        "target": "retry-only",
        "handler": False,
        "cell": "e3c001",
        "schedule": SCHEDULE.to_json(),
        "words": trial_lines(SCHEDULE, FACTS, HISTORY),
        "reproduced": reproduced,
        "runs": 3,
        "confirmed": reproduced > 0,
        "replay": "testbed chaos --schedule runs/x/counterexample.json -s retry-only",
    }
    return {
        "command": "explore",
        "testbed": "0.1.0",
        "run": "20261206-000000-abcdef",
        "startedAt": "2026-12-06T00:00:00Z",
        "wallSeconds": 30.0,
        "seed": None,
        "options": {"ops": 3, "retries": 3, "strategies": ["retry-only"], "promise": "exactly-once"},
        "versions": {},
        "machine": {"platform": "linux", "cpus": 2},
        "verdict": "fail" if counterexample else "pass",
        "rows": [],
        "explore": {
            "trials": 40,
            "searched": 30,
            "shrinking": 7,
            "confirming": 3,
            "seconds": 30.0,
            "trialsPerMinute": 80.0,
            "stopped": "a failure was found and shrunk",
            "breaches": 9,
            "labFailures": 0,
            "coverage": coverage.to_json(),
            **({"counterexample": found} if counterexample else {}),
        },
    }


def test_the_terminal_shows_the_coverage_and_the_counterexample() -> None:
    results = parse(explored(counterexample=True))
    assert results.explore is not None
    assert coverage_text(results.explore).splitlines() == [
        "coverage (struck / armed, per attempt):",
        "fault    boundary        attempt 1  attempt 2",
        "kill     before-request  1/1        -",
        "timeout  after-effect    -          1/1",
    ]
    text = summary_text(results.explore)
    assert "COUNTEREXAMPLE for retry-only: it breaks the promise; smallest: 2 ops, 2 faults;" in text
    assert "reproduced 3 of 3 fresh runs" in text
    assert text.endswith("replay it:\n  testbed chaos --schedule runs/x/counterexample.json -s retry-only")


def test_the_report_draws_a_heatmap_per_fault_and_junit_one_case() -> None:
    results = parse(explored(counterexample=True))
    section = coverage_section(results)
    assert section is not None
    sid, _, html = section
    assert sid == "coverage"
    assert html.count('<figure class="coverage"') == 2
    assert 'data-attempt="2" data-boundary="after-effect" data-struck="1" data-armed="1"' in html
    (case,) = junit(results).iter("testcase")
    assert case.get("name") == "explore retry-only"
    failure = case.find("failure")
    assert failure is not None and "COUNTEREXAMPLE" in (failure.text or "")
    passing = junit(parse(explored(counterexample=False)))
    assert [c.find("failure") for c in passing.iter("testcase")] == [None]
    assert ET.tostring(passing).count(b"<testcase") == 1


def test_a_counterexample_that_never_reproduced_is_unconfirmed_everywhere() -> None:
    results = parse(explored(counterexample=True, reproduced=0))
    assert results.explore is not None and results.explore.counterexample is not None
    assert results.explore.counterexample.confirmed is False
    text = summary_text(results.explore)
    assert "COUNTEREXAMPLE" not in text
    assert "UNCONFIRMED for retry-only: it broke the promise in one trial (smallest: 2 ops, 2 faults)" in text
    assert "in none of its 3 fresh runs (reproduced 0 of 3)" in text
    assert text.endswith("replay it:\n  testbed chaos --schedule runs/x/counterexample.json -s retry-only")
    _, title, section = counterexample_section(results, {}, "")
    assert title == "Unconfirmed counterexample"
    assert '<pre class="terminal counterexample" data-confirmed="false"><span class="line">UNCONFIRMED for' in section
    (case,) = junit(results).iter("testcase")
    failure = case.find("failure")
    assert failure is not None and failure.get("type") == "unconfirmed"
    assert (failure.get("message") or "").startswith("unconfirmed: exactly-once breaks in one trial")
    _, title, confirmed = counterexample_section(parse(explored(counterexample=True)), {}, "")
    assert title == "Counterexample" and 'data-confirmed="true"><span class="line">COUNTEREXAMPLE for' in confirmed


def test_a_stored_counterexample_without_the_field_reads_confirmed_as_it_reproduced() -> None:
    for reproduced in (0, 2):
        document = explored(counterexample=True, reproduced=reproduced)
        del document["explore"]["counterexample"]["confirmed"]  # type: ignore[index]
        found = parse(document).explore
        assert found is not None and found.counterexample is not None
        assert found.counterexample.confirmed is (reproduced > 0)


def test_what_a_trial_found() -> None:
    cell = Cell.trial("record-before", SCHEDULE, handler=False)

    def row(expected: dict[str, int], promise: dict[str, object]) -> Row:
        return Row(cell, Counts(effects=1), 1, 1, 4, 0.1, Expected(expected), promise=promise)

    assert found_in(row({}, promise={"kept": True})) is Found.KEPT
    assert found_in(row({}, promise={"kept": False})) is Found.BREACH
    # The model expected 2 effects, the run saw 1: the lab's own bug, whatever the promise says.
    assert found_in(row({"effects": 2}, promise={"kept": False})) is Found.LAB
    anomalous = row({}, promise={"kept": True})
    anomalous.anomalies.append("unplanned hit")
    assert found_in(anomalous) is Found.LAB
