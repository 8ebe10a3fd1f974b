"""Every boundary, fault and scenario on the real stack, in small cells: observed == model.
The stored run judged again offline, and its report drawn in a browser."""

import hashlib
from pathlib import Path

import pytest

from labcore.boundaries import ORDER
from testbed.experiment.scenarios import SCENARIOS
from tests.support.browser import BROWSER, NO_BROWSER, open_in_browser
from tests.support.dom import parse
from tests.support.helpers import Ran, assert_left_nothing, run_testbed
from tests.support.report_page import assert_cell_timeline, faulted_ops, label_of

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Every cell with two faulted ops: ops 5 and 10 (two armed ops may overlap, in every fault).
OPS, EVERY = 10, 5
N = OPS // EVERY


@pytest.fixture(scope="module")
def full(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    # 4 cells at once (a provider-crash cell still runs alone).
    args = ["--matrix", "full", "--ops", str(OPS), "--every", str(EVERY), "--parallel", "4"]
    return run_testbed(args, tmp_path_factory.mktemp("full"), timeout=400)


def test_every_meaningful_cell_matches_the_model(full: Ran) -> None:
    assert full.code == 0, full.stdout[-3000:] + full.stderr[-3000:]
    rows = full.json["rows"]
    assert all(r["verdict"] == "pass" for r in rows)
    assert {r["boundary"] for r in rows} == {"none", *ORDER}
    assert {r["fault"] for r in rows} == {"none", "kill", "timeout", "late", "provider-crash"}
    assert {r["scenario"] for r in rows} == {name for name, s in SCENARIOS.items() if s.in_full_matrix}
    assert f"{len(rows)}/{len(rows)} cells as expected" in full.stdout
    assert_left_nothing(full)


@pytest.mark.parametrize("boundary", [b.value for b in ORDER])
def test_kills_strike_at_every_boundary(full: Ran, boundary: str) -> None:
    row = full.row("record-before", boundary, fault="kill", scenario="none")
    assert (row["kills"], row["faults"], row["replays"]) == (N, N, N)
    lost = boundary in ("before-request", "before-effect")
    assert (row["effects"], row["missingOperations"], row["falseCompletions"]) == (
        (OPS - N, N, N) if lost else (OPS, 0, 0)
    )


def test_a_timeout_is_an_after_effect_crash_without_a_kill(full: Ran) -> None:
    row = full.row("retry-only", "after-effect", fault="timeout")
    assert (row["kills"], row["faults"], row["effects"], row["duplicateEffects"]) == (0, N, OPS + N, N)


def test_late_completion_with_a_key_waits_out_the_409(full: Ran) -> None:
    keyed = full.row("provider-key", "before-effect", fault="late")
    assert (keyed["effects"], keyed["duplicateEffects"], keyed["unresolved"]) == (OPS, 0, 0)
    assert keyed["requests"] >= OPS + N  # the retry's 409, then the replay
    keyless = full.row("record-after", "before-effect", fault="late")
    assert (keyless["effects"], keyless["duplicateEffects"]) == (OPS + N, N)


def test_unresolved_ops_are_listed_by_id_with_their_reason(full: Ran) -> None:
    withdrawn = full.row("reconcile", "after-effect", scenario="withdrawn")
    assert withdrawn["unresolved"] == N and withdrawn["duplicateEffects"] == 0
    faulted = [f"tenant-demo:notification:{n}" for n in range(EVERY, OPS + 1, EVERY)]
    assert [h["op"] for h in withdrawn["held"]] == faulted
    assert all(h["state"] == "unresolved" and "410" in h["reason"] for h in withdrawn["held"])
    naive = full.row("naive-reconcile", "after-effect", scenario="withdrawn")
    assert (naive["duplicateEffects"], naive["unresolved"]) == (N, 0)
    lagging = full.row("reconcile", "before-effect", scenario="lagging-listing")
    assert lagging["unresolved"] == N and all("listing is empty" in h["reason"] for h in lagging["held"])


def test_changed_payload_is_a_conflict_not_a_duplicate(full: Ran) -> None:
    row = full.row("provider-key", "after-effect", scenario="payload-changed")
    assert (row["conflicts"], row["effects"], row["missingOperations"]) == (N, OPS, 0)
    assert all(h["state"] == "conflict" and "422" in h["reason"] for h in row["held"])


def test_keys_help_only_while_kept_and_honoured(full: Ran) -> None:
    assert full.row("provider-key", "after-effect", scenario="key-expired")["duplicateEffects"] == N
    assert full.row("provider-key", "after-effect", scenario="no-dedup")["duplicateEffects"] == N


def test_stored_error_is_failed_by_provider_not_missing(full: Ran) -> None:
    row = full.row("provider-key", "after-effect", scenario="stored-error")
    assert (row["failedByProvider"], row["missingOperations"], row["effects"]) == (N, 0, OPS - N)


def test_one_table_per_fault_and_scenario_with_marks(full: Ran) -> None:
    titles = [line for line in full.stdout.splitlines() if line and not line[0].isspace() and " / " not in line]
    assert {"kill", "timeout", "late"} <= set(titles)
    assert any(t.startswith("kill, scenario withdrawn:") for t in titles)
    assert f"({N}u)" in full.stdout and f"({N}c)" in full.stdout and f"({N}f)" in full.stdout


def test_a_provider_crash_loses_the_request_before_the_effect_and_keeps_the_effect_after(full: Ran) -> None:
    lost = full.row("record-before", "before-effect", fault="provider-crash")
    assert (lost["kills"], lost["effects"], lost["missingOperations"], lost["falseCompletions"]) == (N, OPS - N, N, N)
    kept = full.row("retry-only", "after-effect", fault="provider-crash")
    assert (kept["effects"], kept["duplicateEffects"]) == (OPS + N, N)  # the log kept the effect; the retry sent again
    keyed = full.row("provider-key", "after-effect", fault="provider-crash")
    assert (keyed["effects"], keyed["duplicateEffects"], keyed["jobsFailed"]) == (OPS, 0, 0)  # the key survived too
    crashes = [next(e for e in events if e["event"] == "killed") for events in keyed["history"].values()]
    assert len(crashes) == N and all(c["provider"] > 0 for c in crashes)
    # Two armed requests may die in one crash: it is timed with its restart once, and is `shared` for the other.
    restarted = {c["provider"] for c in crashes if c.get("restartedMs", 0) > 0}
    assert restarted and all(c["provider"] in restarted for c in crashes if c.get("shared")), crashes


def test_check_gives_every_cells_verdict_again_offline(full: Ran) -> None:
    checked = run_testbed(["latest"], full.tmpdir.parent, timeout=120, command="check")
    assert checked.code == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    rows = len(full.json["rows"])
    assert f"{rows}/{rows} cells as expected" in checked.stdout


def checksums(run: Path) -> dict[str, str]:
    return {
        p.relative_to(run).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()
    }


@pytest.mark.skipif(BROWSER is None, reason=NO_BROWSER)
def test_the_report_of_the_stored_run_draws_every_fault_kinds_timelines(full: Ran) -> None:
    """The page reads the stored run and changes none of it (report.html is all it adds); in
    Chromium, every cell a fault struck has its timeline, provider crashes drawn as such."""
    workdir = full.tmpdir.parent
    run = (workdir / "runs" / full.json["run"]).resolve()
    before = checksums(run)
    made = run_testbed([str(run)], workdir, timeout=120, command="report")
    assert made.code == 0 and made.stdout == f"{run / 'report.html'}\n", made.stdout + made.stderr[-3000:]
    after = checksums(run)
    assert after.pop("report.html") and after == before
    dom = parse(open_in_browser(run / "report.html", workdir / "profile", "--dump-dom"))
    rows = [r for r in full.json["rows"] if faulted_ops(r)]
    faults = {r["fault"] for r in rows}
    assert faults == {"kill", "timeout", "late", "provider-crash"}
    assert {g.attrs["data-fault"] for g in dom.find_all("details", "timeline-group")} == faults
    for row in rows:
        assert_cell_timeline(dom.one("figure", "cell-timeline", data_cell=label_of(row)), row)
    crashed = dom.find_all("details", "timeline-group", data_fault="provider-crash")
    assert all(f.find_all("g", "provider-kill") for g in crashed for f in g.find_all("figure", "cell-timeline"))
