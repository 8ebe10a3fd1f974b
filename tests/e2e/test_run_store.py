"""Every run kept and shown: the run store, `runs`, `check` (offline re-judging),
`compare`, JUnit XML."""

import json
import shutil
import sqlite3
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest

from testbed.store import results
from tests.support.helpers import Ran, assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e

SMALL = ["--ops", "20", "-s", "retry-only", "-s", "provider-key", "-b", "none", "-b", "after-effect"]

# The stored run's workdir, and the run.
Stored = tuple[Path, Ran]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Stored:
    workdir = tmp_path_factory.mktemp("stored")
    ran = run_testbed([*SMALL, "--junit", str(workdir / "junit.xml")], workdir)
    assert ran.code == 0, ran.stderr
    return workdir, ran


def stored_command(args: list[str], workdir: Path, command: str) -> Ran:
    return run_testbed(args, workdir, timeout=60, command=command)


def test_the_run_is_kept_with_its_history_log_and_logs(stored: Stored) -> None:
    workdir, ran = stored
    run = workdir / "runs" / ran.json["run"]
    assert (workdir / "runs" / "latest").resolve() == run.resolve()
    assert json.loads((run / "results.json").read_text())["rows"] == ran.json["rows"]
    kinds = {json.loads(line)["type"] for line in (run / "history.jsonl").read_text().splitlines()}
    assert kinds == {"cell", "event", "facts"}
    with sqlite3.connect(run / "provider.sqlite3") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert db.execute("SELECT COUNT(*) FROM effects").fetchone()[0] == 20 + 22 + 20 + 20
    assert (run / "logs" / "provider.log").exists() and list((run / "logs" / "workers").glob("w*.log"))
    assert_left_nothing(ran)


def test_a_fresh_runs_files_match_the_published_schemas(stored: Stored) -> None:
    workdir, ran = stored
    run = workdir / "runs" / ran.json["run"]
    reference = Path(__file__).resolve().parents[2] / "docs" / "reference"
    schema = json.loads((reference / "results.schema.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(json.loads((run / "results.json").read_text()))
    assert [r.cell for r in results.read(run / "results.json").rows] == ["c001", "c002", "c003", "c004"]
    line = jsonschema.Draft202012Validator(json.loads((reference / "history.schema.json").read_text()))
    for text in (run / "history.jsonl").read_text().splitlines():
        line.validate(json.loads(text))


@pytest.mark.parametrize(
    ("tamper", "said"),
    [
        ("results.json", "results.json does not match the results schema: rows.1.effects: expected an integer"),
        ("history.jsonl", "history.jsonl:1 does not match the history schema: cell.ledger: expected a string"),
    ],
)
def test_check_refuses_a_run_whose_files_do_not_match_their_schema(
    stored: Stored, tmp_path: Path, tamper: str, said: str
) -> None:
    workdir, ran = stored
    copy = tmp_path / "copy"
    shutil.copytree(workdir / "runs" / ran.json["run"], copy)
    if tamper == "results.json":
        document = json.loads((copy / tamper).read_text())
        document["rows"][1]["effects"] = str(document["rows"][1]["effects"])
        (copy / tamper).write_text(json.dumps(document, indent=2))
    else:
        first, *rest = (copy / tamper).read_text().splitlines(keepends=True)
        (copy / tamper).write_text(json.dumps(json.loads(first) | {"ledger": 7}) + "\n" + "".join(rest))
    checked = stored_command([str(copy)], workdir, "check")
    assert checked.code == 2 and checked.stdout == ""
    assert checked.stderr == f"testbed: error: {copy / tamper}{said.removeprefix(tamper)}\n"


def test_junit_has_one_case_per_cell(stored: Stored) -> None:
    workdir, _ = stored
    suite = ET.parse(workdir / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "4" and suite.get("failures") == "0"


def test_runs_lists_the_stored_run(stored: Stored) -> None:
    workdir, ran = stored
    listed = stored_command([], workdir, "runs")
    line = next(line for line in listed.stdout.splitlines() if line.startswith(ran.json["run"]))
    assert line.split()[1:5] == ["chaos", ran.json["startedAt"], "4", "pass"]


def test_check_gives_the_runs_verdict_offline(stored: Stored) -> None:
    workdir, _ = stored
    checked = stored_command(["latest"], workdir, "check")
    assert checked.code == 0, checked.stdout + checked.stderr
    assert "4/4 cells as expected" in checked.stdout


def test_check_with_other_expectations(stored: Stored) -> None:
    workdir, _ = stored
    checked = stored_command(["latest", "--expect", "retry-only@after-effect=20/0"], workdir, "check")
    assert checked.code == 1
    assert "DIFFERS  retry-only @ after-effect (kill): effects expected 20, observed 22" in checked.stdout


def test_check_names_the_op_whose_effect_was_deleted_from_a_log_without_digests(stored: Stored, tmp_path: Path) -> None:
    """A run stored before digests.json (as this copy, without it) is judged as its log is now."""
    workdir, ran = stored
    copy = tmp_path / "copy"
    shutil.copytree(workdir / "runs" / ran.json["run"], copy)
    with sqlite3.connect(copy / "provider.sqlite3") as db:
        ledger = db.execute("SELECT ledger FROM effects ORDER BY id DESC LIMIT 1").fetchone()[0]
        db.execute(
            "DELETE FROM effects WHERE id = (SELECT MAX(id) FROM effects WHERE ledger = ? AND reference = ?)",
            (ledger, "tenant-demo:notification:13"),
        )
    refused = stored_command([str(copy)], workdir, "check")
    assert refused.code == 2 and "provider.sqlite3 is not as the run stored it" in refused.stderr, refused.stderr
    (copy / "digests.json").unlink()
    checked = stored_command([str(copy)], workdir, "check")
    assert checked.code == 1, checked.stdout
    assert "missingOperations expected 0, observed 1" in checked.stdout
    assert "tenant-demo:notification:13 (no fault): effects 1 expected, 0 observed" in checked.stdout


def test_compare_shows_the_cells_that_differ(stored: Stored) -> None:
    workdir, ran = stored
    (workdir / "other").mkdir()
    other = run_testbed([*SMALL, "--expect", "provider-key@none=19/0"], workdir / "other")
    assert other.code == 1
    runs = [str(workdir / "runs" / ran.json["run"]), str(workdir / "other" / "runs" / "latest")]
    compared = stored_command(runs, workdir, "compare")
    assert compared.code == 1  # as diff: 1 when anything differs
    assert "provider-key @ none" in compared.stdout and "verdict" in compared.stdout
    same = stored_command([runs[0], runs[0]], workdir, "compare")
    assert same.code == 0 and "every cell shows the same counts and verdict" in same.stdout


def test_no_store_keeps_nothing(workdir: Path) -> None:
    ran = run_testbed(["--ops", "5", "-s", "retry-only", "-b", "none", "--no-store"], workdir)
    assert ran.code == 0 and not (workdir / "runs").exists()
