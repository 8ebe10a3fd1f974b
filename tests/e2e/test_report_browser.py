"""report.html of real runs, as `testbed report` writes it from the stored run and headless
Chromium opens it: every cell, every cell's timeline (a row per faulted op) and every plot
are in the DOM the browser built; an exploration's page opens with its counterexample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.report.latency import recovery_mode
from testbed.store.formats import StoredEvent
from tests.support.browser import BROWSER, NO_BROWSER, PNG, open_in_browser, screenshot
from tests.support.dom import Node, parse
from tests.support.helpers import Ran, RanIn, assert_left_nothing, run_testbed
from tests.support.report_page import assert_cell_timeline, faulted_ops, label_of

ROOT = str(Path(__file__).resolve().parents[2])

# Checked before any run starts: without a browser there is nothing to look at.
pytestmark = [pytest.mark.e2e, pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)]


def render_and_open(ran: Ran, workdir: Path) -> tuple[Node, Path]:
    assert ran.results is not None, ran.stderr
    run = (workdir / "runs" / ran.json["run"]).resolve()
    made = run_testbed([str(run)], workdir, timeout=60, command="report")
    assert made.code == 0 and made.stdout == f"{run / 'report.html'}\n", made.stdout + made.stderr
    page = run / "report.html"
    dom = parse(open_in_browser(page, workdir / "profile", "--dump-dom"))
    shot = workdir / "report.png"
    assert screenshot(page, workdir / "profile", shot)[:8] == PNG and shot.stat().st_size > 20_000
    return dom, shot


def assert_everything_shown(dom: Node, results: dict[str, Any]) -> None:
    rows = results["rows"]
    assert dom.one("span", id="run-verdict").all_text() == results["verdict"]
    # every cell in a heatmap, with its counts and verdict
    for row in rows:
        label = label_of(row)
        cells = dom.find_all("td", "cell", data_cell=label)
        assert cells, f"no heatmap cell for {label}"
        for cell in cells:
            assert cell.attrs["data-verdict"] == row["verdict"]
            assert cell.attrs["data-effects"] == str(row["effects"])
            assert cell.attrs["data-duplicates"] == str(row["duplicateEffects"])
    faults = {(r["fault"], r["scenario"]) for r in rows if r["boundary"] != "none"}
    assert {(g.attrs["data-fault"], g.attrs["data-scenario"]) for g in dom.find_all("div", "group")} == faults
    # every cell with faulted ops: its timeline
    modes: dict[str, int] = {}
    for row in rows:
        faulted = faulted_ops(row)
        figures = dom.find_all("figure", "cell-timeline", data_cell=label_of(row))
        assert len(figures) == bool(faulted), label_of(row)
        if not faulted:
            continue
        assert_cell_timeline(figures[0], row)
        for events in faulted.values():
            if any(e["event"] == "killed" for e in events):
                typed = [StoredEvent.model_validate(e) for e in events]
                mode = recovery_mode(row["fault"], typed, results["options"].get("recovery"))
                modes[mode] = modes.get(mode, 0) + 1
    # a latency plot per recovery mode, a dot per replayed kill
    plots = {p.attrs["data-mode"]: p for p in dom.find_all("figure", "latency-plot")}
    assert set(plots) == set(modes)
    for mode, kills in modes.items():
        assert len(plots[mode].one("g", "strip", data_kind="replay").find_all("circle", "dot")) == kills
    # every cell that differs, with its differences
    for row in rows:
        if row["verdict"] == "fail":
            failure = dom.one("div", "failure", data_cell=label_of(row))
            items = [li.all_text() for li in failure.one("ul", "differences").find_all("li")]
            assert items == row["differences"]


@pytest.fixture(scope="module")
def kill_run(tmp_path_factory: pytest.TempPathFactory) -> RanIn:
    workdir = tmp_path_factory.mktemp("report-kill")
    args = ["--ops", "20", "-s", "retry-only", "-s", "provider-key", "-b", "after-effect", "-b", "none"]
    return run_testbed(args, workdir), workdir


@pytest.fixture(scope="module")
def worker_kill_run(tmp_path_factory: pytest.TempPathFactory) -> RanIn:
    """Worker kills, and an expectation the run will not meet, so the page has a failing cell to show."""
    workdir = tmp_path_factory.mktemp("report-kill-worker")
    args = ["--ops", "10", "--every", "5", "-s", "provider-key", "-b", "after-effect", "--fault", "kill-worker"]
    args += ["--expect", "provider-key@after-effect=11/0"]
    return run_testbed(args, workdir), workdir


def test_report_of_a_kill_run_shows_every_cell_timeline_and_plot(kill_run: RanIn) -> None:
    ran, workdir = kill_run
    assert ran.code == 0, ran.stdout + ran.stderr
    assert_left_nothing(ran)
    dom, _ = render_and_open(ran, workdir)
    assert_everything_shown(dom, ran.json)
    # 20 ops, every 10th faulted, two faulted cells: two timelines of two rows each
    figures = {f.attrs["data-cell"]: f for f in dom.find_all("figure", "cell-timeline")}
    assert {label: len(f.find_all("g", "op-row")) for label, f in figures.items()} == {
        "retry-only @ after-effect (kill)": 2,
        "provider-key @ after-effect (kill)": 2,
    }
    # retry-only duplicates the killed ops: the killed attempt's effect and the retry's, on each op's row
    for op in figures["retry-only @ after-effect (kill)"].find_all("g", "op-row"):
        assert op.attrs["data-outcome"] == "duplicated" and len(op.find_all("g", "effect")) == 2
    assert {
        op.attrs["data-outcome"] for op in figures["provider-key @ after-effect (kill)"].find_all("g", "op-row")
    } == {"once"}
    assert not dom.find_all("div", "failure")


def test_report_of_a_worker_kill_run_shows_recovery_and_the_failing_cell(worker_kill_run: RanIn) -> None:
    ran, workdir = worker_kill_run
    assert ran.code == 1, ran.stdout + ran.stderr  # the cell differs from the expectation given
    assert_left_nothing(ran)
    dom, _ = render_and_open(ran, workdir)
    assert_everything_shown(dom, ran.json)
    (plot,) = dom.find_all("figure", "latency-plot")
    assert plot.attrs["data-mode"] == "kill-worker, forced recovery"
    (figure,) = dom.find_all("figure", "cell-timeline")
    for op in figure.find_all("g", "op-row"):
        assert op.find_all("g", "kill-worker") and op.find_all("g", "restart") and op.find_all("g", "requeue")
    assert dom.one("div", "failure").attrs["data-cell"] == "provider-key @ after-effect (kill-worker)"


def test_report_shows_the_processes_a_cells_jobs_left(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler that leaves a process in its work-horse's group (and one out of it) per op."""
    (tmp_path / "pids").mkdir()
    monkeypatch.setenv("LEFTOVER_PIDS", str(tmp_path / "pids"))
    leaves, sends = "tests.support.userjobs:leaves_a_process", "tests.support.userjobs:send_with_requests"
    ran = run_testbed(["--handler", leaves, "--handler", sends, "-b", "none", "--ops", "3"], tmp_path)
    assert ran.code == 0, ran.stdout + ran.stderr
    assert_left_nothing(ran)
    dom, _ = render_and_open(ran, tmp_path)
    for strategy, left in ((leaves, 3), (sends, 0)):
        (cell,) = dom.find_all("td", "cell", data_strategy=strategy)
        assert cell.attrs["data-leftovers"] == str(left)
        assert [m.all_text() for m in cell.find_all("span", "marks")] == ([f"{left}l"] if left else [])
    said = "Nl processes the jobs left running after their attempts, stopped"
    assert said in dom.one("section", id="heatmaps").all_text()
    lines = [line.split() for line in dom.one("pre", "text-table").all_text().splitlines()]
    assert [leaves, "3", "/", "0", "(3l)"] in lines and [sends, "3", "/", "0"] in lines


@pytest.fixture(scope="module")
def worked_example_run(tmp_path_factory: pytest.TempPathFactory) -> RanIn:
    """The worked example's exploration, as a new user runs it (its two-kill counterexample)."""
    workdir = tmp_path_factory.mktemp("report-explore")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("EXAMPLES_DB", str(workdir / "jobs.sqlite3"))
        args = ["--handler", "examples.lookup_once:send", "--path", ROOT, "--seed", "2"]
        return run_testbed(args, workdir, timeout=600, command="explore"), workdir


def test_report_of_the_worked_example_opens_with_its_counterexample(worked_example_run: RanIn) -> None:
    ran, workdir = worked_example_run
    assert ran.code == 1, ran.stdout + ran.stderr  # a confirmed counterexample
    assert_left_nothing(ran)
    found = ran.json["explore"]["counterexample"]
    dom, _ = render_and_open(ran, workdir)
    first = dom.find_all("section")[0]
    assert first.attrs["id"] == "counterexample" and first.one("h2").all_text() == "Counterexample"
    # as the terminal printed it: what broke, each op, reproduced N of M, the replay command, each attempt a line
    terminal = first.one("pre", "terminal").all_text()
    assert terminal in ran.stdout
    assert terminal.startswith("COUNTEREXAMPLE for examples.lookup_once:send: it breaks the promise;")
    assert "1 op, 2 faults" in terminal.splitlines()[0]
    assert f"reproduced {found['reproduced']} of {found['runs']} fresh runs" in terminal.splitlines()[0]
    assert first.one("span", "replay").all_text().strip() == found["replay"]
    assert found["replay"].startswith("testbed chaos --schedule ")
    assert f"its ops killed, as the run saw them (trial {found['cell']}):" in terminal
    # its timeline, there and not again below
    (figure,) = first.find_all("figure", "cell-timeline")
    assert figure.find_all("g", "op-row")
    index = [r["cell"] for r in ran.json["rows"]].index(found["cell"])
    assert len(dom.find_all("details", "cell-timelines", id=f"cell-{index}")) == 1
    # then the coverage, the trials by the phases the search ran
    assert [s.attrs["id"] for s in dom.find_all("section")][:3] == ["counterexample", "coverage", "trials"]
    phases = {p["phase"]: len(p["cells"]) for p in ran.json["explore"]["phases"]}
    shown = dom.one("section", id="trials").find_all("details", "phase")
    assert {p.attrs["data-phase"]: int(p.attrs["data-trials"]) for p in shown} == phases
    assert sum(phases.values()) == len(ran.json["rows"])
    # the counterexample once among the findings, the other failing trials as the way there
    failing = [r["cell"] for r in ran.json["rows"] if r["verdict"] == "fail"]
    findings = dom.one("section", id="failures")
    assert [d.attrs["data-cell"] for d in findings.find_all("div", "failure")] == [label_of(ran.json["rows"][index])]
    way = [li.attrs["data-cell"] for li in findings.one("ul", "way-there").find_all("li")]
    assert sorted([found["cell"], *way]) == sorted(failing)
    # no grid without values: not one heatmap per mix of faults, every coverage map with its counts
    assert not dom.find_all("table", "heatmap")
    maps = dom.find_all("svg", "coverage-map")
    assert len(maps) == len({s["fault"] for s in ran.json["explore"]["coverage"]})
    for drawing in maps:
        places = drawing.find_all("rect", "struck")
        assert places and all(int(p.attrs["data-armed"]) > 0 for p in places)
    summary = dom.one("section", id="summary").all_text()
    assert "schedule (kill)" not in summary and "under a schedule of 1 op and 2 faults" in summary
