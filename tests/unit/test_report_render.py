"""The stored-run renderers on small results documents: report.html, JUnit XML, compare."""

from __future__ import annotations

import copy
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from testbed.report import html, reading, tables
from testbed.report.compare import compare, in_common, render_text
from testbed.report.junit import write_junit
from testbed.report.latency import recovery_mode, replay_latency
from testbed.store import history
from testbed.store import results as stored
from testbed.store.formats import StoredEvent
from testbed.store.series import Series
from tests.support.dom import Node, parse
from tests.support.rows import row

T = 1_796_000_000.0


def typed(events: list[dict[str, Any]]) -> list[StoredEvent]:
    """Events as the report reads them from a stored run."""
    return [StoredEvent.model_validate(e) for e in events]


def horse_killed(
    t: float, worker: str = "w1", pid: int = 100, again: str = "w2", again_pid: int = 101
) -> list[dict[str, Any]]:
    """A work-horse killed after the effect; RQ's Retry brings the job back in another worker."""
    return [
        {"event": "attempt-start", "at": t, "attempt": 1, "pid": pid, "worker": worker, "enqueuedAt": t - 0.1},
        {"event": "hit", "at": t + 0.010, "attempt": 1, "boundary": "after-effect", "fault": "kill", "pid": pid},
        {"event": "killed", "at": t + 0.020, "attempt": 1, "boundary": "after-effect", "worker": worker}
        | {"pids": [pid], "confirmedMs": 1.5},
        {"event": "attempt-start", "at": t + 0.320, "attempt": 2, "pid": again_pid, "worker": again}
        | {"enqueuedAt": t + 0.025},
        {"event": "contact", "at": t + 0.330, "attempt": 2, "pid": again_pid, "worker": again, "answer": "201"},
        {"event": "attempt-end", "at": t + 0.340, "attempt": 2, "pid": again_pid, "worker": again}
        | {"outcome": "completed", "detail": "eff_9"},
    ]


def worker_killed(t: float) -> list[dict[str, Any]]:
    """A worker and its work-horse killed; forced recovery requeues the job, a fresh worker replaces it."""
    return [
        {"event": "attempt-start", "at": t, "attempt": 1, "pid": 200, "worker": "w3", "enqueuedAt": t - 0.1},
        {"event": "hit", "at": t + 0.010, "attempt": 1, "boundary": "after-effect", "fault": "kill-worker", "pid": 200},
        {"event": "killed", "at": t + 0.020, "attempt": 1, "boundary": "after-effect", "worker": "w3"}
        | {"pids": [190, 200], "confirmedMs": 3.0},
        {"event": "worker-restarted", "at": t + 0.030, "dead": "w3", "fresh": "w5"},
        {"event": "recovered", "at": t + 0.047, "mode": "forced", "jobs": ["c001-5"]},
        {"event": "attempt-start", "at": t + 0.920, "attempt": 2, "pid": 210, "worker": "w5", "enqueuedAt": t + 0.045},
        {"event": "attempt-end", "at": t + 0.930, "attempt": 2, "pid": 210, "worker": "w5", "outcome": "completed"},
    ]


def timed_out(t: float) -> list[dict[str, Any]]:
    """A held request: the call times out, nothing is killed, the retry runs."""
    return [
        {"event": "attempt-start", "at": t, "attempt": 1, "pid": 300, "worker": "w1", "enqueuedAt": t - 0.1},
        {"event": "hit", "at": t + 0.010, "attempt": 1, "boundary": "before-effect", "fault": "timeout", "pid": 300},
        {"event": "call-timeout", "at": t + 0.510, "attempt": 1, "pid": 300, "worker": "w1"},
        {"event": "attempt-end", "at": t + 0.512, "attempt": 1, "pid": 300, "worker": "w1", "outcome": "error"},
        {"event": "attempt-start", "at": t + 0.530, "attempt": 2, "pid": 301, "worker": "w2", "enqueuedAt": t + 0.52},
        {"event": "attempt-end", "at": t + 0.540, "attempt": 2, "pid": 301, "worker": "w2", "outcome": "completed"},
    ]


def chaos_results() -> dict[str, Any]:
    """Four strategies-by-boundary cells of kill, one timeout cell, one cell that differs."""
    lat = {"min": 300.0, "median": 300.0, "p99": 300.0, "max": 300.0}
    failing = row(
        "retry-only",
        "after-effect",
        kills=1,
        faults=1,
        replays=1,
        effects=11,
        duplicateEffects=1,
        verdict="fail",
        differences=["effects expected 10, observed 11"],
        expected={"effects": 10, "duplicateEffects": 1},
        history={"tenant-demo:notification:5": horse_killed(T)},
        opDifferences=[
            {
                "op": "tenant-demo:notification:5",
                "plan": [{"attempt": 1, "boundary": "after-effect", "fault": "kill"}],
                "expected": {"effects": 1},
                "observed": {"effects": 2},
                "events": horse_killed(T),
            }
        ],
        replayLatencyMs=lat,
    )
    return document_of(
        run="20261130-000000-abcdef",
        wallSeconds=3.2,
        options={"ops": 10, "retries": 1, "recovery": "forced"},
        verdict="fail",
        rows=[
            row("retry-only", "none"),
            row("provider-key", "none"),
            failing,
            row(
                "provider-key",
                "after-effect",
                kills=1,
                faults=1,
                replays=1,
                history={
                    "tenant-demo:notification:5": horse_killed(T + 5, "w2", 110, "w1", 111),
                    "tenant-demo:notification:6": [  # an op that was not faulted: no timeline
                        {"event": "attempt-start", "at": T + 6, "attempt": 1, "pid": 120, "worker": "w1"}
                    ],
                },
                replayLatencyMs=lat,
            ),
            row("record-before", "before-effect", effects=9, missingOperations=1, kills=1, faults=1),
            row(
                "provider-key",
                "before-effect",
                fault="timeout",
                faults=1,
                replays=1,
                history={"tenant-demo:notification:7": timed_out(T + 10)},
            ),
            row(
                "provider-key",
                "after-effect",
                fault="kill-worker",
                kills=1,
                faults=1,
                replays=1,
                history={"tenant-demo:notification:8": worker_killed(T + 20)},
            ),
        ],
    )


def document_of(**fields: Any) -> dict[str, Any]:
    """A results document as a run writes it (no command: as the oldest runs), with these fields."""
    return {
        "testbed": "0.1.0",
        "run": "r",
        "startedAt": "2026-11-30T00:00:00Z",
        "wallSeconds": 1.0,
        "seed": 0,
        "options": {"ops": 10, "retries": 1},
        "versions": {"testbed": "0.1.0"},
        "machine": {"platform": "Linux", "cpus": 2},
        "verdict": "pass",
    } | fields


@pytest.fixture
def page() -> Node:
    return parse(html.render(stored.parse(chaos_results())))


def test_every_cell_is_in_a_heatmap_coloured_by_what_it_shows(page: Node) -> None:
    rows = stored.parse(chaos_results()).rows
    labels = {c.attrs["data-cell"] for c in page.find_all("td", "cell")}
    assert labels == {reading.label(r) for r in rows} and len(labels) == len(rows)
    dup = page.one("td", "cell", data_strategy="retry-only", data_boundary="after-effect", data_fault="kill")
    assert {"outcome-duplicates", "verdict-fail"} <= dup.classes
    assert (dup.attrs["data-effects"], dup.attrs["data-missing"], dup.attrs["data-duplicates"]) == ("11", "0", "1")
    assert "11 / 0 / 1" in dup.all_text() and "differs" in dup.all_text()
    lost = page.one("td", "cell", data_strategy="record-before", data_boundary="before-effect")
    assert {"outcome-missing", "verdict-pass"} <= lost.classes
    controls = page.find_all("td", "cell", data_strategy="provider-key", data_boundary="none", data_fault="none")
    assert len(controls) == 3 and all("outcome-clean" in c.classes for c in controls)  # one per group


def test_one_group_per_fault_and_scenario_with_its_text_table(page: Node) -> None:
    groups = {(g.attrs["data-fault"], g.attrs["data-scenario"]) for g in page.find_all("div", "group")}
    assert groups == {("kill", "none"), ("timeout", "none"), ("kill-worker", "none")}
    kill = page.one("div", "group", data_fault="kill", data_scenario="none")
    text = kill.one("pre", "text-table").all_text()
    assert text.splitlines()[0] == "kill"
    assert text.splitlines()[2].split() == ["retry-only", "10", "/", "0", "-", "11", "/", "0", "!"]
    # the control column joins every group of its scenario
    assert len(page.one("div", "group", data_fault="timeout").find_all("td", "cell")) == 3


def celery_results() -> dict[str, Any]:
    """A Celery run: the same strategies under two delivery settings, a kill-worker cell under one."""
    killed: dict[str, Any] = {"kills": 1, "faults": 1, "replays": 1}
    rows = [
        row("retry-only", "none", delivery="early-ack"),
        row("retry-only", "before-effect", effects=9, missingOperations=1, kills=1, faults=1, delivery="early-ack"),
        row("retry-only", "none", delivery="reject-on-lost"),
        row(
            "retry-only",
            "after-effect",
            effects=11,
            duplicateEffects=1,
            delivery="reject-on-lost",
            history={"tenant-demo:notification:5": horse_killed(T)},
            **killed,
        ),
        row(
            "provider-key",
            "after-effect",
            fault="kill-worker",
            delivery="reject-on-lost",
            history={"tenant-demo:notification:8": worker_killed(T + 20)},
            **killed,
        ),
    ]
    return document_of(options={"ops": 10, "retries": 1, "engine": "celery"}, rows=rows)


def test_a_celery_run_has_one_group_per_delivery_setting_titled_as_its_tables() -> None:
    results = stored.parse(celery_results())
    dom = parse(html.render(results))
    groups = dom.find_all("div", "group")
    assert [(g.attrs["data-delivery"], g.attrs["data-fault"]) for g in groups] == [
        ("early-ack", "kill"),
        ("reject-on-lost", "kill"),
        ("reject-on-lost", "kill-worker"),
    ]
    assert len({g.attrs["id"] for g in groups}) == len(groups)
    titles = [t.title for t in tables.grids(results.rows, tables.stored_row_key)]
    assert [g.one("h3").all_text() for g in groups] == titles
    assert titles[0] == "celery early-ack (Celery's default: acknowledged as the task starts): kill"
    # each setting's control joins its own groups only
    early = dom.one("div", "group", data_delivery="early-ack")
    assert {c.attrs["data-delivery"] for c in early.find_all("td", "cell")} == {"early-ack"}
    assert len(dom.one("div", "group", data_delivery="reject-on-lost", data_fault="kill").find_all("td", "cell")) == 2
    assert [li.all_text() for li in dom.one("ul", "summary").find_all("li")] == [
        "celery early-ack: retry-only loses work (1 op missing at before-effect (kill)).",
        "celery reject-on-lost: retry-only duplicates work (1 extra effect at after-effect (kill)).",
        "celery reject-on-lost: provider-key is exactly-once in every cell (1 faulted, 0 not).",
    ]
    folds = dom.find_all("details", "timeline-group")
    assert [(f.attrs["data-delivery"], f.attrs["data-fault"]) for f in folds] == [
        ("reject-on-lost", "kill"),
        ("reject-on-lost", "kill-worker"),
    ]
    assert folds[1].find_all("summary")[0].all_text().startswith(f"{titles[2]}; 1 cell(s)")
    # what brought a killed task back is Celery's setting, not RQ's Retry
    assert [p.attrs["data-mode"] for p in dom.find_all("figure", "latency-plot")] == [
        "kill (pool child), celery reject-on-lost",
        "kill-worker, celery reject-on-lost",
    ]


def test_one_timeline_per_cell_a_row_per_faulted_op(page: Node) -> None:
    figures = {f.attrs["data-cell"]: f for f in page.find_all("figure", "cell-timeline")}
    assert {label: [r.attrs["data-op"] for r in f.find_all("g", "op-row")] for label, f in figures.items()} == {
        "retry-only @ after-effect (kill)": ["tenant-demo:notification:5"],
        "provider-key @ after-effect (kill)": ["tenant-demo:notification:5"],  # op 6 was not faulted: no row
        "provider-key @ before-effect (timeout)": ["tenant-demo:notification:7"],
        "provider-key @ after-effect (kill-worker)": ["tenant-demo:notification:8"],
    }
    killed = figures["provider-key @ after-effect (kill-worker)"]
    assert [(a.attrs["data-attempt"], a.attrs["data-worker"]) for a in killed.find_all("g", "attempt")] == [
        ("1", "w3"),
        ("2", "w5"),
    ]
    assert "killed" in killed.find_all("g", "attempt")[0].classes
    assert [m.attrs["data-track"] for m in killed.find_all("g", "mark")] == ["lab", "lab", "lab", "attempt"]
    assert len(killed.find_all("g", "kill-worker")) == 1 and len(killed.find_all("g", "restart")) == 1
    # 0 is the cell's start (here the attempt's enqueue): the requeue is placed from it
    assert killed.one("g", "requeue").attrs["data-at"] == "147.0"
    timeout = figures["provider-key @ before-effect (timeout)"]
    assert timeout.find_all("g", "timeout") and not timeout.find_all("g", "kill")
    # no provider log given: outcomes are not known, and the page says why
    assert {r.attrs["data-outcome"] for f in figures.values() for r in f.find_all("g", "op-row")} == {"unknown"}
    assert "kept no record of the provider" in timeout.all_text()
    # the failing cell is open, the others closed but for the first few
    cell = page.one("details", "cell-timelines", data_cell="retry-only @ after-effect (kill)")
    assert "open" in cell.attrs


def test_replay_latency_plotted_per_recovery_mode(page: Node) -> None:
    plots = {p.attrs["data-mode"]: p for p in page.find_all("figure", "latency-plot")}
    assert set(plots) == {"kill (work-horse), requeued by RQ's Retry", "kill-worker, forced recovery"}
    horse = plots["kill (work-horse), requeued by RQ's Retry"]
    assert horse.attrs["data-kills"] == "2"
    replay = horse.one("g", "strip", data_kind="replay")
    assert len(replay.find_all("circle", "dot")) == 2
    assert len(horse.one("g", "strip", data_kind="requeue").find_all("circle", "dot")) == 2


def test_a_failing_cell_lists_its_differences_and_ops(page: Node) -> None:
    failure = page.one("div", "failure")
    assert failure.attrs["data-cell"] == "retry-only @ after-effect (kill)"
    assert [li.all_text() for li in failure.one("ul", "differences").find_all("li")] == [
        "effects expected 10, observed 11"
    ]
    op = failure.one("div", "op-difference")
    assert op.attrs["data-op"] == "tenant-demo:notification:5"
    assert op.find_all("svg", "timeline-svg") and op.find_all("table", "events")


def test_the_page_needs_nothing_from_elsewhere() -> None:
    markup = html.render(stored.parse(chaos_results()))
    dom = parse(markup)
    assert not dom.find_all("script") and not dom.find_all("link") and not dom.find_all("img")
    assert "http://" not in markup.replace('xmlns="http://www.w3.org/2000/svg"', "")
    assert "https://" not in markup and "@import" not in markup and "url(" not in markup


def test_history_stream_replaces_the_rows_history() -> None:
    results = chaos_results()
    results["rows"] = [row("retry-only", "after-effect", kills=1, faults=1, cell="c001")]  # no history in the row
    key = {"type": "event", "cell": "c001"}
    lines = [key | {"op": "op-1"} | e for e in horse_killed(T)]
    facts = {"op": "op-1", "attempts": 2, "outcome": "completed", "detail": "eff_9", "jobFailed": False}
    lines.append({"type": "facts", "cell": "c001", "intent": "op-1", "ops": [facts]})  # not an event
    lines.append(lines[0] | {"cell": "c002", "op": "op-of-a-cell-not-in-the-results"})
    stream = [history.parse_line(json.dumps(line)) for line in lines]
    dom = parse(html.render(stored.parse(results), stream))
    (figure,) = dom.find_all("figure", "cell-timeline")
    assert [r.attrs["data-op"] for r in figure.find_all("g", "op-row")] == ["op-1"]
    events = dom.one("details", "events-list", data_op="op-1")
    assert len(events.one("table", "events").find_all("tr")) == 1 + len(horse_killed(T))


def test_load_run_draws_throughput_kills_and_effects_per_strategy() -> None:
    series = Series(interval=1.0, limit=4)
    for second in range(10):
        series.sample(second, over=second * 10, kills=second, effects=second * 11)
    series.sample(9.5, over=100, kills=10, effects=110, final=True)
    points = series.to_json()
    # bounded: thinned to every other point as it fills, the first and the final point kept
    assert [p["t"] for p in points] == [0, 4, 8, 9.5]
    assert points[-1] == {"t": 9.5, "over": 100, "kills": 10, "effects": 110}
    rows = [
        row("retry-only", "random", kills=10, effects=110, duplicateEffects=10, series=points),
        row("provider-key", "random", kills=10, series=points),
    ]
    dom = parse(html.render(stored.parse(document_of(options={"ops": 10, "retries": 1, "killRate": 0.1}, rows=rows))))
    plots = {p.attrs["data-metric"]: p for p in dom.find_all("figure", "load-plot")}
    assert set(plots) == {"throughput", "kills", "effects"}
    for plot in plots.values():
        assert [p.attrs["data-strategy"] for p in plot.find_all("polyline", "series-line")] == [
            "retry-only",
            "provider-key",
        ]
    assert dom.one("table", "load-table").find_all("tr")[1].find_all("td")[0].all_text() == "retry-only"
    without = parse(html.render(stored.parse(document_of(rows=[row("retry-only", "random", invariants=[])]))))
    assert without.find_all("section", id="load") and not without.find_all("figure", "load-plot")


def test_replay_latency_of_an_op() -> None:
    horse = replay_latency(typed(horse_killed(T)))
    assert horse is not None
    assert horse.requeue_ms == pytest.approx(5.0, abs=0.01) and horse.replay_ms == pytest.approx(300.0, abs=0.01)
    worker = replay_latency(typed(worker_killed(T)))
    assert worker is not None
    assert worker.requeue_ms == pytest.approx(27.0, abs=0.01) and worker.replay_ms == pytest.approx(900.0, abs=0.01)
    assert replay_latency(typed(timed_out(T))) is None
    assert recovery_mode("kill-worker", typed(worker_killed(T)), "rq") == "kill-worker, forced recovery"
    assert recovery_mode("kill-worker", [], "rq") == "kill-worker, rq recovery"


def test_stored_rows_print_the_runs_table() -> None:
    rows = stored.parse(chaos_results()).rows[:5]
    grid = tables.grids(rows, tables.stored_row_key)[0]
    assert grid.columns == ["none", "before-effect", "after-effect"]
    assert grid.strategies == ["retry-only", "record-before", "provider-key"]
    assert tables.grid_text(grid, tables.stored_cell_text).splitlines()[1:] == [
        "strategy       none    before-effect  after-effect",
        "retry-only     10 / 0  -              11 / 0 !",
        "record-before  -       9 / 1          -",
        "provider-key   10 / 0  -              10 / 0",
    ]


def test_junit_one_case_per_cell_failures_with_their_differences(tmp_path: Path) -> None:
    results = chaos_results()
    path = tmp_path / "ci" / "junit.xml"
    write_junit(path, stored.parse(results))
    top = ET.parse(path).getroot()
    suite = top.find("testsuite")
    assert suite is not None
    cases = suite.findall("testcase")
    assert len(cases) == int(suite.get("tests", "")) == len(results["rows"]) == int(top.get("tests", ""))
    assert suite.get("failures") == top.get("failures") == "1" and suite.get("errors") == "0"
    failed = [c for c in cases if c.find("failure") is not None]
    assert [(c.get("classname"), c.get("name")) for c in failed] == [("kill/none", "retry-only @ after-effect (kill)")]
    failure = failed[0].find("failure")
    assert failure is not None and failure.get("message") == "effects expected 10, observed 11"
    # The same words as the terminal's and the report's (testbed.report.findings).
    assert "tenant-demo:notification:5 (attempt 1 kill at after-effect): effects 1 expected, 2 observed" in (
        failure.text or ""
    )
    names = {c.get("name") for c in cases}
    assert {"retry-only @ none", "provider-key @ before-effect (timeout)"} <= names


def test_junit_of_an_incomplete_run_is_in_error_naming_the_part_and_the_cells_not_judged(tmp_path: Path) -> None:
    results = chaos_results() | {"incomplete": True, "failure": "the provider died (pid 42, SIGKILL)"}
    results |= {"notRun": ["provider-key @ after-effect (kill)"], "verdict": "incomplete"}
    path = tmp_path / "junit.xml"
    write_junit(path, stored.parse(results))
    suite = ET.parse(path).getroot().find("testsuite")
    assert suite is not None and suite.get("errors") == "1"
    assert int(suite.get("tests", "")) == len(results["rows"]) + 1
    [error] = [e for c in suite.findall("testcase") if (e := c.find("error")) is not None]
    assert error.get("message") == "verdict withheld: the provider died (pid 42, SIGKILL)"
    assert "not judged: provider-key @ after-effect (kill)" in (error.text or "")


def test_compare_finds_the_changed_cell_its_latency_and_cells_in_one_only() -> None:
    a = chaos_results()
    b = copy.deepcopy(a)
    moved = b["rows"][3]  # provider-key @ after-effect (kill)
    moved["effects"], moved["duplicateEffects"], moved["verdict"] = 11, 1, "fail"
    moved["replayLatencyMs"] = {"min": 350.0, "median": 350.0, "p99": 410.0, "max": 410.0}
    del b["rows"][0]
    b["rows"].append(row("reconcile", "none"))
    changes = compare(stored.parse(a), stored.parse(b))
    by_status = {c.status: c for c in changes}
    assert sorted(c.status for c in changes) == ["changed", "only-a", "only-b"]
    changed = by_status["changed"]
    assert changed.label == "provider-key @ after-effect (kill)" and changed.verdicts == ("pass", "fail")
    assert [(x.name, x.a, x.b) for x in changed.counts] == [("effects", 10, 11), ("duplicateEffects", 0, 1)]
    assert ("replay median", 300.0, 350.0) in [(x.name, x.a, x.b) for x in changed.latency]
    assert by_status["only-a"].label == "retry-only @ none" and by_status["only-b"].label == "reconcile @ none"
    text = render_text(changes, "run-a", "run-b")
    assert text.splitlines()[0] == "run-a -> run-b: 1 cell(s) differ, 1 only in run-a, 1 only in run-b"
    assert "effects 10 -> 11; duplicateEffects 0 -> 1" in text
    assert compare(stored.parse(a), stored.parse(a)) == []
    assert render_text([], "a", "b") == "a -> b: every cell shows the same counts and verdict"


def test_compare_says_when_two_runs_share_no_cell() -> None:
    a = stored.parse(chaos_results())
    unrelated = copy.deepcopy(chaos_results())
    unrelated["rows"] = [row("reconcile", "none"), row("fresh-key", "after-effect")]
    b = stored.parse(unrelated)
    assert in_common(a, b) == 0 and in_common(a, a) == len(a.rows)
    text = render_text(compare(a, b), "a", "b", in_common(a, b))
    assert text.startswith("a -> b: no cell in common, nothing to compare (")


def test_compare_lists_a_cell_whose_replays_got_much_slower() -> None:
    a = chaos_results()
    b = copy.deepcopy(a)
    b["rows"][3]["replayLatencyMs"] = {"min": 900.0, "median": 900.0, "p99": 900.0, "max": 900.0}
    (slower,) = compare(stored.parse(a), stored.parse(b))
    assert slower.status == "latency" and slower.counts == []
    assert compare(stored.parse(a), stored.parse(b), latency_factor=None) == []


def test_the_run_caption_names_the_faulted_ops_in_english() -> None:
    assert tables.run_caption(100, 10, 1) == "100 ops per cell, first attempt of every 10th op faulted, 1 retry"
    assert [tables.run_caption(20, n, 2).split("every ")[1].split(" faulted")[0] for n in (1, 2, 3, 11, 22)] == [
        "op",
        "2nd op",
        "3rd op",
        "11th op",
        "22nd op",
    ]


def leftover_results() -> dict[str, Any]:
    """The article's control cells, one of whose jobs left 6 processes running."""
    rows = [row("retry-only", "none", leftoverProcesses=6), row("provider-key", "none")]
    return document_of(rows=rows, leftoverProcesses=12)


def test_a_cells_leftover_processes_are_marked_in_its_table_cell_and_the_legend() -> None:
    rows = stored.parse(leftover_results()).rows
    (grid,) = tables.grids(rows, tables.stored_row_key)
    assert tables.grid_text(grid, tables.stored_cell_text).splitlines()[2:] == [
        "retry-only    10 / 0 (6l)",
        "provider-key  10 / 0",
    ]
    assert tables.legend(map(tables.stored_cell_text, rows)) == (
        "marks: Nl processes the jobs left running after their attempts, stopped"
    )
    # None left: the table as the article's, no mark and no legend.
    clean = stored.parse(chaos_results()).rows
    assert "l)" not in "".join(map(tables.stored_cell_text, clean))
    assert tables.legend(map(tables.stored_cell_text, clean)) == "! differs from expectation"


def test_a_cells_leftover_processes_are_in_its_heatmap_cell() -> None:
    dom = parse(html.render(stored.parse(leftover_results())))
    left = dom.one("td", "cell", data_strategy="retry-only")
    assert left.attrs["data-leftovers"] == "6" and left.one("span", "marks").all_text() == "6l"
    assert left.attrs["title"].endswith("; 6 processes the jobs left running after their attempts, stopped")
    clean = dom.one("td", "cell", data_strategy="provider-key")
    assert clean.attrs["data-leftovers"] == "0" and not clean.find_all("span", "marks")
    assert "Nl processes the jobs left running" in dom.one("section", id="heatmaps").all_text()


def test_junit_counts_a_cells_leftover_processes(tmp_path: Path) -> None:
    path = tmp_path / "junit.xml"
    write_junit(path, stored.parse(leftover_results()))
    cases = {c.get("name"): c for c in ET.parse(path).getroot().iter("testcase")}
    for name, left in (("retry-only @ none", "6"), ("provider-key @ none", "0")):
        properties = {p.get("name"): p.get("value") for p in cases[name].iter("property")}
        assert properties["leftoverProcesses"] == left
    said = cases["retry-only @ none"].findtext("system-out") or ""
    assert said.splitlines()[-1] == "6 processes the jobs left running after their attempts, stopped"
    assert "left running" not in (cases["provider-key @ none"].findtext("system-out") or "")


def test_the_load_table_has_a_column_of_leftover_processes_where_any_were_left() -> None:
    rows = [row("retry-only", "random", leftoverProcesses=3), row("provider-key", "random")]
    grid = tables.load_grid(stored.parse(document_of(rows=rows)).rows)
    assert [line[-2:] for line in grid] == [["left", "verdict"], ["3", "holds"], ["0", "holds"]]
    none_left = tables.load_grid(stored.parse(document_of(rows=[row("retry-only", "random")])).rows)
    assert none_left[0] == tables.LOAD_HEADER
