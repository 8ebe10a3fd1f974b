"""The report of an exploration (pure): it opens with the counterexample as the terminal prints it,
then the coverage; its trials by the phases stored, whatever their names; the counterexample named
once among the findings, the other failing trials as the way there; no grid without values."""

from __future__ import annotations

import copy
from typing import Any

from testbed.report import explore, findings, html
from testbed.store.results import parse
from tests.support.dom import Node
from tests.support.dom import parse as dom
from tests.support.rows import row

OP = "tenant-demo:notification:1"
REPLAY = "testbed chaos --schedule runs/x/counterexample.json -s retry-only"
T = 1_800_000_000.0


def schedule(*ops: list[tuple[int, str, str]]) -> dict[str, Any]:
    faults = [{"faults": [{"attempt": a, "boundary": b, "fault": f} for a, b, f in op]} for op in ops]
    return {"format": "testbed-schedule/1", "scenario": "none", "retries": 3, "ops": faults}


SMALLEST = schedule([(1, "before-request", "kill"), (2, "after-effect", "kill")])
LARGER = schedule([(1, "before-effect", "kill"), (2, "after-effect", "kill")], [(1, "job-start", "kill")])
CLEAN = schedule([])
WORDS = [
    "op 1: attempt 1 killed at before-request; attempt 2 killed at after-effect; attempt 3 completed:"
    " 2 effects from 2 requests, job finished: duplicated"
]
KILLED = [
    {"event": "attempt-start", "at": T, "attempt": 1, "worker": "w1", "pid": 11},
    {
        "event": "killed",
        "at": T + 0.05,
        "attempt": 1,
        "boundary": "before-request",
        "worker": "w1",
        "pids": [11],
        "confirmedMs": 2.5,
    },
    {"event": "attempt-start", "at": T + 0.1, "attempt": 2, "worker": "w2", "pid": 12, "enqueuedAt": T + 0.06},
    {"event": "attempt-end", "at": T + 0.2, "attempt": 2, "outcome": "completed", "detail": "eff_1"},
]


def trial(cell: str, plan: dict[str, Any], duplicated: int = 0, **values: Any) -> dict[str, Any]:
    failing: dict[str, Any] = (
        {"verdict": "fail", "differences": ["exactly-once: 1 op duplicated"]} if duplicated else {}
    )
    return row(
        "retry-only",
        "schedule",
        cell=cell,
        schedule=plan,
        intended=len(plan["ops"]),
        effects=len(plan["ops"]) + duplicated,
        duplicateEffects=duplicated,
        **failing,
        **values,
    )


def exploration(phases: list[tuple[str, list[str]]] | None, found: bool = True, reproduced: int = 2) -> dict[str, Any]:
    """Two trials enumerated, the first failure in the search, one shrinking step, two confirming runs."""
    rows = [
        trial("e1c001", CLEAN),
        trial("e1c002", CLEAN),
        trial("e2c001", LARGER, duplicated=1),
        trial("e3c001", SMALLEST, duplicated=1, history={OP: KILLED}, kills=1),
        trial("e4c001", SMALLEST, duplicated=1 if reproduced else 0),
        trial("e4c002", SMALLEST, duplicated=1 if reproduced > 1 else 0),
    ]
    counterexample = {
        "found": "breach",
        "target": "retry-only",
        "handler": False,
        "cell": "e3c001",
        "schedule": SMALLEST,
        "words": WORDS,
        "reproduced": reproduced,
        "runs": 2,
        "confirmed": reproduced > 0,
        "replay": REPLAY,
    }
    summary: dict[str, Any] = {
        "trials": 6,
        "searched": 3,
        "shrinking": 1,
        "confirming": 2,
        "seconds": 6.0,
        "trialsPerMinute": 60.0,
        "stopped": "a failure was found and shrunk" if found else "its budget of 6 trials was spent",
        "breaches": 4,
        "labFailures": 0,
        "coverage": [
            {"attempt": 1, "boundary": "before-request", "fault": "kill", "armed": 3, "struck": 3},
            {"attempt": 2, "boundary": "after-effect", "fault": "kill", "armed": 4, "struck": 4},
        ],
    }
    if phases is not None:
        summary["phases"] = [{"phase": name, "cells": cells} for name, cells in phases]
    if found:
        summary["counterexample"] = counterexample
    return {
        "command": "explore",
        "testbed": "0.1.0",
        "run": "20261207-000000-abcdef",
        "startedAt": "2026-12-07T00:00:00Z",
        "wallSeconds": 7.0,
        "seed": 2,
        "options": {"ops": 3, "retries": 3, "strategies": ["retry-only"], "promise": "exactly-once"},
        "versions": {},
        "machine": {"platform": "linux", "cpus": 2},
        "verdict": "fail",
        "rows": rows,
        "explore": summary,
    }


PHASES = [("enumerate", ["e1c001", "e1c002"]), ("search", ["e2c001"]), ("shrink", ["e3c001"])]
PHASES += [("confirm", ["e4c001", "e4c002"])]


def page(document: dict[str, Any]) -> Node:
    return dom(html.render(parse(document)))


def sections(node: Node) -> list[str]:
    return [s.attrs["id"] for s in node.find_all("section")]


def assert_no_grid_without_values(node: Node) -> None:
    """No heatmap table without a cell drawn in it, no coverage map without a place struck or armed."""
    for table in node.find_all("table", "heatmap"):
        assert table.find_all("td", "cell"), table.all_text()
    for drawing in node.find_all("svg", "coverage-map"):
        places = drawing.find_all("rect", "struck")
        assert places and all(p.attrs["data-armed"] != "0" for p in places)


def test_the_page_opens_with_the_counterexample_as_the_terminal_prints_it() -> None:
    results = parse(exploration(PHASES))
    shown = page(exploration(PHASES))
    assert sections(shown)[:3] == ["counterexample", "coverage", "trials"]
    first = shown.find_all("section")[0]
    assert first.one("h2").all_text() == "Counterexample"
    terminal = first.one("pre", "terminal")
    assert results.explore is not None and results.explore.counterexample is not None
    stored = results.rows[3]
    assert terminal.all_text() == explore.counterexample_text(results.explore.counterexample, stored, stored.history)
    lines = terminal.all_text().splitlines()
    headline = "COUNTEREXAMPLE for retry-only: it breaks the promise; smallest: 1 op, 2 faults; reproduced 2 of 2"
    assert lines[0] == f"{headline} fresh runs"
    assert lines[1:4] == [f"  {WORDS[0]}", "replay it:", f"  {REPLAY}"]
    assert first.one("span", "replay").all_text() == f"  {REPLAY}\n"
    # one line per attempt, as the run saw them, then the trial's timeline
    assert lines[5:7] == [
        "its ops killed, as the run saw them (trial e3c001):",
        f"{OP}  (replayed 50.0 ms after the kill)",
    ]
    assert "killed at before-request: work-horse of w1 (pid 11), confirmed gone in 2.5 ms" in lines[8]
    assert first.one("figure", "cell-timeline").attrs["data-cell"] == "retry-only @ schedule (1 op, 2 faults)"
    # shown once: the timelines below leave it out
    assert len(shown.find_all("details", "cell-timelines", id="cell-3")) == 1
    assert_no_grid_without_values(shown)
    assert not shown.find_all("table", "heatmap")  # trials are no matrix: no grid per mix of faults


def test_trials_are_grouped_by_the_phases_stored_whatever_their_names() -> None:
    shown = page(exploration(PHASES))
    trials = shown.one("section", id="trials")
    phases = trials.find_all("details", "phase")
    assert [(p.attrs["data-phase"], p.attrs["data-trials"]) for p in phases] == [
        ("enumerate", "2"),
        ("search", "1"),
        ("shrink", "1"),
        ("confirm", "2"),
    ]
    assert [r.attrs["data-cell"] for r in phases[0].find_all("tr", "trial")] == ["e1c001", "e1c002"]
    (marked,) = trials.find_all("tr", "counterexample")
    assert marked.attrs["data-cell"] == "e3c001"
    assert "kill@before-request#1, kill@after-effect#2 (the counterexample)" in marked.all_text()
    assert explore.figures_text(parse(exploration(PHASES)).explore).startswith(  # type: ignore[arg-type]
        "6 trials in 6 s (60 per minute; enumerate 2, search 1, shrink 1, confirm 2);"
    )


def test_a_run_stored_before_the_phases_has_its_trials_in_search_shrink_confirm() -> None:
    results = parse(exploration(None))
    assert explore.trial_phases(results) == [("search", [0, 1, 2]), ("shrink", [3]), ("confirm", [4, 5])]


def test_the_findings_name_the_counterexample_once_and_the_other_failing_trials_as_the_way_there() -> None:
    found = page(exploration(PHASES)).one("section", id="failures")
    assert found.one("h2").all_text() == "Findings (the counterexample, 3 other failing trials)"
    (counterexample,) = found.find_all("div", "counterexample")
    assert counterexample.attrs["id"] == "failure-3"
    assert not [d for d in found.find_all("div", "failure") if d is not counterexample]
    way = [
        (li.attrs["data-phase"], li.attrs["data-cell"], li.all_text())
        for li in found.one("ul", "way-there").find_all("li")
    ]
    assert [(p, c) for p, c, _ in way] == [("search", "e2c001"), ("confirm", "e4c001"), ("confirm", "e4c002")]
    assert way[0][2].endswith("exactly-once: 1 op duplicated")
    assert way[1][2].endswith("(the counterexample again)")


def test_the_summary_says_the_counterexample_in_words() -> None:
    sentences = explore.summary_sentences(parse(exploration(PHASES)))
    assert sentences == [
        "retry-only breaks exactly-once under a schedule of 1 op and 2 faults: 1 extra effect; it did so again"
        " in 2 of its 2 fresh runs.",
        WORDS[0].capitalize() + ".",
        "The search ran 6 trials (2 in enumerate, 1 in search, 1 in shrink, 2 in confirm); 4 broke the promise.",
    ]
    assert not any("schedule (kill)" in s for s in sentences)
    shown = page(exploration(PHASES)).one("section", id="summary")
    assert [li.all_text() for li in shown.find_all("li")] == sentences


def test_an_unconfirmed_counterexample_says_so_on_the_page() -> None:
    shown = page(exploration(PHASES, reproduced=0))
    first = shown.find_all("section")[0]
    assert first.attrs["id"] == "counterexample"
    assert first.one("h2").all_text() == "Unconfirmed counterexample"
    assert first.one("p", "unconfirmed").all_text().startswith("UNCONFIRMED: not a counterexample until it reproduces")
    assert first.one("pre", "terminal").attrs["data-confirmed"] == "false"
    assert first.one("pre", "terminal").all_text().startswith("UNCONFIRMED for retry-only")
    summary = shown.one("section", id="summary").find_all("li")[0].all_text()
    assert summary.startswith("Unconfirmed: retry-only breaks exactly-once under a schedule of 1 op and 2 faults")


def test_an_exploration_that_found_nothing_says_what_was_covered() -> None:
    document = exploration(PHASES, found=False)
    shown = page(document)
    first = shown.find_all("section")[0]
    assert first.one("h2").all_text() == "No counterexample"
    assert first.one("p", "nothing-found").all_text() == (
        "No counterexample: 6 trials, and the search ended because its budget of 6 trials was spent. They armed"
        " 2 places (a fault at a boundary of an attempt), 2 of them struck at least once; by fault, places armed:"
        " kill at 2 (2 struck, on attempts 1 to 2)."
    )
    assert sections(shown)[1] == "coverage"
    assert_no_grid_without_values(shown)


def test_a_chaos_run_of_a_schedule_draws_its_cells_values() -> None:
    """A cell whose boundary no column names (a schedule's) has a column of its own: no grid is drawn empty."""
    document = exploration(PHASES)
    chaos = copy.deepcopy(document) | {"command": "chaos", "explore": None, "rows": [document["rows"][3]]}
    shown = page(chaos)
    (table,) = shown.find_all("table", "heatmap")
    (cell,) = table.find_all("td", "cell")
    assert (cell.attrs["data-boundary"], cell.attrs["data-effects"], cell.attrs["data-duplicates"]) == (
        "schedule",
        "2",
        "1",
    )
    assert "schedule" in shown.one("pre", "text-table").all_text().splitlines()[1]
    assert_no_grid_without_values(shown)
    (sentence,) = findings.summary(parse(chaos).rows)
    assert sentence == "retry-only duplicates work (1 extra effect at schedule (1 op, 2 faults))."


def test_an_exploration_the_lab_failed_under_says_so_first_and_keeps_its_trials() -> None:
    document = exploration(PHASES) | {"explore": None, "incomplete": True, "failure": "the provider died"}
    document["verdict"] = "incomplete"
    shown = page(document)
    first = shown.find_all("section")[0]
    assert first.one("h2").all_text() == "No counterexample"
    assert first.all_text().endswith(
        "The lab failed during the exploration (the provider died): no counterexample was kept."
        " The 6 trials judged are below."
    )
    (phase,) = shown.one("section", id="trials").find_all("details", "phase")
    assert (phase.attrs["data-phase"], phase.attrs["data-trials"]) == ("judged before the lab failed", "6")
    assert_no_grid_without_values(shown)
