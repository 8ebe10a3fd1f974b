"""report.html of real runs, opened in headless Chromium: every cell, every
faulted op's timeline and every plot are in the DOM the browser built."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from testbed.lab import results as stored
from testbed.report import document, html
from testbed.report.latency import recovery_mode
from tests.support.dom import Node, parse
from tests.support.helpers import Ran, assert_left_nothing, run_testbed

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
BROWSER = next((path for name in BROWSERS if (path := shutil.which(name))), None)
PNG = b"\x89PNG\r\n\x1a\n"

# Checked before any run starts: without a browser there is nothing to look at.
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(BROWSER is None, reason=f"no Chromium to open the report in ({', '.join(BROWSERS)} on PATH)"),
]


def open_in_browser(binary: str, page: Path, profile: Path, *extra: str) -> str:
    """Chromium headless on the page, offline: every host name fails to resolve."""
    command = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--host-resolver-rules=MAP * ~NOTFOUND",
        f"--user-data-dir={profile}",
        *extra,
        page.as_uri(),
    ]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=120)
    finally:
        # Its helper processes (zygote, renderer) are in the session it leads: none may outlive the test.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err[-2000:]
    return out


def render_and_open(ran: Ran, workdir: Path) -> tuple[Node, Path]:
    assert ran.results is not None, ran.stderr
    page = workdir / "report.html"
    page.write_text(html.render(stored.parse(ran.results)))
    assert BROWSER is not None
    binary = BROWSER
    dom = parse(open_in_browser(binary, page, workdir / "profile", "--dump-dom"))
    shot = workdir / "report.png"
    open_in_browser(binary, page, workdir / "profile", f"--screenshot={shot}", "--window-size=1400,3000")
    assert shot.read_bytes()[:8] == PNG and shot.stat().st_size > 20_000
    return dom, shot


def assert_everything_shown(dom: Node, results: dict) -> None:
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
    # every faulted op's timeline: its lanes, one bar per attempt, its kill
    modes: dict[str, int] = {}
    for row in rows:
        for op, events in (row.get("history") or {}).items():
            if not document.faulted(events):
                continue
            figure = dom.one("figure", "timeline", data_cell=label_of(row), data_op=op)
            plot = figure.one("svg", "timeline-svg")
            workers = {e["worker"] for e in events if e["event"] == "attempt-start"}
            assert workers <= {lane.attrs["data-worker"] for lane in plot.find_all("g", "lane")}
            starts = sum(e["event"] == "attempt-start" for e in events)
            assert len(plot.find_all("g", "attempt")) == starts
            kills = sum(e["event"] == "killed" for e in events)
            assert len(plot.find_all("g", "kill")) == kills
            if kills:
                mode = recovery_mode(row["fault"], events, results["options"].get("recovery"))
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


def label_of(row: dict) -> str:
    return document.label(stored.parse_row(row))


@pytest.fixture(scope="module")
def kill_run(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("report-kill")
    args = ["--ops", "20", "-s", "retry-only", "-s", "provider-key", "-b", "after-effect", "-b", "none"]
    return run_testbed(args, workdir), workdir


@pytest.fixture(scope="module")
def worker_kill_run(tmp_path_factory):
    """Worker kills, and an expectation the run will not meet, so the page has a failing cell to show."""
    workdir = tmp_path_factory.mktemp("report-kill-worker")
    args = ["--ops", "10", "--every", "5", "-s", "provider-key", "-b", "after-effect", "--fault", "kill-worker"]
    args += ["--expect", "provider-key@after-effect=11/0"]
    return run_testbed(args, workdir), workdir


def test_report_of_a_kill_run_shows_every_cell_timeline_and_plot(kill_run):
    ran, workdir = kill_run
    assert ran.code == 0, ran.stdout + ran.stderr
    assert_left_nothing(ran)
    dom, _ = render_and_open(ran, workdir)
    assert_everything_shown(dom, ran.results)
    # 20 ops, every 10th faulted, two faulted cells: four timelines
    assert len(dom.find_all("figure", "timeline")) == 4
    assert not dom.find_all("div", "failure")


def test_report_of_a_worker_kill_run_shows_recovery_and_the_failing_cell(worker_kill_run):
    ran, workdir = worker_kill_run
    assert ran.code == 1, ran.stdout + ran.stderr  # the cell differs from the expectation given
    assert_left_nothing(ran)
    dom, _ = render_and_open(ran, workdir)
    assert_everything_shown(dom, ran.results)
    (plot,) = dom.find_all("figure", "latency-plot")
    assert plot.attrs["data-mode"] == "kill-worker, forced recovery"
    for figure in dom.find_all("figure", "timeline"):
        assert figure.find_all("g", "restart") and figure.find_all("g", "requeue")
    assert dom.one("div", "failure").attrs["data-cell"] == "provider-key @ after-effect (kill-worker)"
