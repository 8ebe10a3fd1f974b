"""What a run found, where people look: the report page in headless Chromium, `testbed check`,
JUnit and the terminal name the same ops with the same words, for a user's job and a built-in."""

from __future__ import annotations

import hashlib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from testbed.report import findings
from testbed.store import results as stored
from tests.support.browser import BROWSER, NO_BROWSER, open_in_browser
from tests.support.dom import Node, parse
from tests.support.helpers import Ran, RanIn, run_testbed

pytestmark = pytest.mark.e2e

HANDLER = "examples.naive:send"


@pytest.fixture(scope="module")
def handler_run(tmp_path_factory: pytest.TempPathFactory) -> RanIn:
    """A user's job that duplicates after the effect, stored, with its report and JUnit."""
    workdir = tmp_path_factory.mktemp("findings-handler")
    args = ["--handler", HANDLER, "-b", "none", "-b", "after-effect", "--ops", "20", "--every", "5"]
    ran = run_testbed([*args, "--report", "--junit", str(workdir / "junit.xml")], workdir)
    assert ran.code == 1, ran.stdout + ran.stderr  # exactly-once is broken at after-effect
    return ran, workdir


@pytest.fixture(scope="module")
def withdrawn_run(tmp_path_factory: pytest.TempPathFactory) -> RanIn:
    """reconcile holds an op unresolved when its effect is withdrawn: a passing cell that names ops."""
    workdir = tmp_path_factory.mktemp("findings-withdrawn")
    args = ["--scenario", "withdrawn", "-s", "reconcile", "-b", "after-effect", "--ops", "20", "--every", "5"]
    ran = run_testbed([*args, "--report", "--junit", str(workdir / "junit.xml")], workdir)
    assert ran.code == 0, ran.stdout + ran.stderr
    return ran, workdir


def _page(ran: Ran, workdir: Path) -> Node:
    run_dir = workdir / "runs" / ran.json["run"]
    return parse(open_in_browser(run_dir / "report.html", workdir / "profile", "--dump-dom"))


def _duplicated(ran: Ran) -> list[str]:
    (row,) = [r for r in ran.json["rows"] if r["boundary"] == "after-effect"]
    ops = [op["op"] for op in row["promise"]["ops"] if op["breach"] == "duplicated"]
    assert len(ops) == 4  # every 5th of 20 ops was killed after its effect
    return ops


def test_check_report_and_compare_leave_a_stored_run_unchanged(handler_run: RanIn, withdrawn_run: RanIn) -> None:
    """First of the module: no command has opened these stored runs yet."""
    (ran, workdir), (other, other_dir) = handler_run, withdrawn_run
    run_dir = workdir / "runs" / ran.json["run"]

    def sums() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.rglob("*")) if p.is_file()}

    before = sums()
    run_testbed([str(run_dir)], workdir, command="check")
    run_testbed([str(run_dir), str(other_dir / "runs" / other.json["run"])], workdir, command="compare")
    report = run_testbed([str(run_dir)], workdir, command="report")
    assert report.code == 0
    after = sums()
    assert after == before


@pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)
def test_the_report_names_every_duplicated_op_and_says_which_handler_duplicates(handler_run: RanIn) -> None:
    ran, workdir = handler_run
    dom = _page(ran, workdir)
    summary = [li.all_text() for li in dom.one("ul", "summary").find_all("li")]
    assert any(s.startswith(f"{HANDLER} duplicates work") for s in summary), summary
    failure = dom.one("div", "failure", data_cell=f"{HANDLER} @ after-effect (kill)")
    named = {li.attrs["data-op"] for li in failure.find_all("li", "op", data_kind="duplicated")}
    assert named == set(_duplicated(ran))


@pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)
def test_the_report_names_the_unresolved_ops_of_a_passing_cell(withdrawn_run: RanIn) -> None:
    ran, workdir = withdrawn_run
    (row,) = [r for r in ran.json["rows"] if r["boundary"] == "after-effect"]
    held = [h["op"] for h in row["held"]]
    assert row["verdict"] == "pass" and held and row["unresolved"] == len(held)
    dom = _page(ran, workdir)
    finding = dom.one("div", "finding", data_cell="reconcile @ after-effect (kill, withdrawn)")
    assert "as expected (model)" in finding.one("p", "verdict-words").all_text()
    named = [li.attrs["data-op"] for li in finding.find_all("li", "op", data_kind="unresolved")]
    assert named == held


def test_the_terminal_check_and_junit_say_the_same_words(handler_run: RanIn, withdrawn_run: RanIn) -> None:
    for ran, workdir in (handler_run, withdrawn_run):
        run_dir = workdir / "runs" / ran.json["run"]
        words = findings.words(stored.parse(ran.json).rows)
        assert words in ran.stdout
        checked = run_testbed([str(run_dir)], workdir, command="check")
        assert words in checked.stdout
        assert "(not reached)" not in checked.stdout  # every armed fault was hit and killed
        cases = ET.parse(workdir / "junit.xml").getroot().iter("testcase")
        said = "\n".join((case.findtext("system-out") or "") + (case.findtext("failure") or "") for case in cases)
        for row in stored.parse(ran.json).rows:
            for op in findings.cell_findings(row).ops:
                assert op.text in said, op.text
