"""`--handler` on the command line: users' jobs in the same table as the built-ins, and bad handlers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, run_testbed

pytestmark = pytest.mark.e2e


@pytest.fixture(autouse=True)
def examples_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples' own database, outside the run's temp dir (which must be left empty)."""
    monkeypatch.setenv("EXAMPLES_DB", str(tmp_path / "jobs.sqlite3"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--handler", "tests.support.broken_job:send"],
            "cannot import tests.support.broken_job: ModuleNotFoundError: No mod",
        ),
        (["--handler", "tests.support.userjobs:NOT_A_FUNCTION"], "NOT_A_FUNCTION is not callable (it is a int)"),
        (["--handler", "send"], "handler 'send' must be MODULE:FUNCTION"),
        # A newline in a spec is shown escaped, never split the error line (no module's name has one).
        (["--handler", "no\nsuch:send"], "handler 'no\\nsuch:send' must be MODULE:FUNCTION"),
        (["--handler", "x" * 5000 + ":send"], " characters)"),
        (["--handler", "examples.keyed:send", "--promise", "twice"], "unknown promise 'twice'"),
        (["--handler", "examples.keyed:send", "--path", "no/such/dir"], "is not a directory"),
        (["--expect", "examples.keyed:send@none=1/0"], "unknown strategy 'examples.keyed:send'"),
    ],
)
def test_bad_handlers_exit_2_with_one_line_before_anything_starts(workdir: Path, args: list[str], message: str) -> None:
    ran = run_testbed([*args, "--ops", "5", "--every", "5"], workdir, timeout=60)
    assert ran.code == 2
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1, ran.stderr
    assert lines[0].startswith("testbed: error: ") and message in lines[0]
    assert len(lines[0]) < 600, "an error line repeats a few hundred characters of its input at most"
    assert ran.results is None
    assert_left_nothing(ran)


def test_a_job_that_hangs_is_reported_by_the_cell_timeout(workdir: Path) -> None:
    args = ["--handler", "tests.support.userjobs:hangs", "-b", "none", "--ops", "2", "--cell-timeout", "3"]
    ran = run_testbed(args, workdir, timeout=120)
    assert ran.code == 3
    assert "testbed: error: tests.support.userjobs:hangs @ none did not finish within 3 s (0/2 jobs over)" in ran.stderr
    assert_left_nothing(ran)


def test_handlers_and_strategies_in_one_table(workdir: Path) -> None:
    args = ["--handler", "examples.naive:send", "--handler", "examples.keyed:send", "-s", "record-after"]
    ran = run_testbed([*args, "-b", "none", "-b", "after-effect", "--ops", "20"], workdir)
    assert ran.code == 1, ran.stderr
    lines = ran.stdout.splitlines()
    assert lines[lines.index("kill") + 1].split() == ["strategy", "none", "after-effect"]
    table = {line.split()[0]: line for line in lines[lines.index("kill") + 2 : lines.index("kill") + 5]}
    assert table["record-after"].split()[1:] == ["20", "/", "0", "22", "/", "0"]
    assert table["examples.naive:send"].split()[1:] == ["20", "/", "0", "22", "/", "0", "!"]
    assert table["examples.keyed:send"].split()[1:] == ["20", "/", "0", "20", "/", "0"]
    assert "DIFFERS  examples.naive:send @ after-effect (kill): exactly-once: 2 ops duplicated" in ran.stdout
    assert ":tenant-demo:notification:20: duplicated: the provider recorded 2 effects from 2 requests" in ran.stdout
    rows = {(r["strategy"], r["boundary"]): r for r in ran.json["rows"]}
    naive = rows[("examples.naive:send", "after-effect")]
    assert naive["verdict"] == "fail" and naive["promise"]["duplicated"] == 2 and naive["duplicateEffects"] == 2
    assert rows[("examples.keyed:send", "after-effect")]["promise"]["kept"]
    assert ran.json["options"]["handlers"] == ["examples.naive:send", "examples.keyed:send"]
    assert_left_nothing(ran)


def test_replay_and_load_take_a_handler(workdir: Path) -> None:
    replay = run_testbed(["--handler", "examples.keyed:send", "--fault", "kill", "--ops", "10"], workdir, 240, "replay")
    assert replay.code == 0, replay.stderr
    assert "killed at after-effect" in replay.stdout
    assert "examples.keyed:send @ after-effect (kill), recovery forced: 2 kill(s)" in replay.stdout
    (workdir / "results.json").unlink()
    args = ["--handler", "examples.keyed:send", "--ops", "60", "--kill-rate", "0.3", "--workers", "2"]
    load = run_testbed(args, workdir, 240, "load")
    assert load.code == 0, load.stderr + load.stdout
    (row,) = load.json["rows"]
    assert (row["effects"], row["missingOperations"], row["promise"]["kept"]) == (60, 0, True)
    assert row["kills"] > 0
    assert_left_nothing(load)
