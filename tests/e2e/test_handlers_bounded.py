"""A user's handler cannot hold a run up or outlive it: its import has a deadline, what it
leaves running is stopped and counted, its output is capped, and a work-horse it ends
with `os._exit(0)` is a dead one."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.support.helpers import assert_left_nothing, left_alive, run_testbed

pytestmark = pytest.mark.e2e


@pytest.fixture
def pids(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the handlers write the pids of the processes they leave behind."""
    where = tmp_path / "pids"
    where.mkdir()
    monkeypatch.setenv("LEFTOVER_PIDS", str(where))
    return where


def test_an_import_that_never_ends_is_one_line_and_exit_2(workdir: Path, pids: Path) -> None:
    args = ["--handler", "tests.support.loops_at_import:send", "--import-timeout", "2", "-b", "none", "--ops", "2"]
    ran = run_testbed(args, workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [
        "testbed: error: importing tests.support.loops_at_import:send took longer than 2 s (--import-timeout)"
    ]
    assert len(list(pids.iterdir())) == 1 and left_alive(pids) == []
    assert_left_nothing(ran)


LEAVES, SENDS = "tests.support.userjobs:leaves_a_process", "tests.support.userjobs:send_with_requests"
LEFT_SAID = "processes the jobs left running after their attempts, stopped"


def test_processes_a_handler_leaves_are_stopped_and_counted_by_cell(workdir: Path, pids: Path) -> None:
    junit = workdir / "junit.xml"
    args = ["--handler", LEAVES, "--handler", SENDS, "-b", "none", "--ops", "6", "--junit", str(junit)]
    ran = run_testbed(args, workdir, timeout=120)
    assert ran.code == 0, ran.stderr
    left = len(list(pids.iterdir()))
    assert left == 12  # two per op
    assert left_alive(pids) == []
    assert ran.json["leftoverProcesses"] == left
    # Each row its own: the one left in each work-horse's group (the other left it: the run's, at its end).
    assert {row["strategy"]: row["leftoverProcesses"] for row in ran.json["rows"]} == {LEAVES: 6, SENDS: 0}
    assert f"the jobs left {left} process(es) running after their attempts: stopped" in ran.stderr
    # The terminal's table marks the cell, and says what the mark means.
    table = ran.stdout.split("\n\n")[1].splitlines()
    assert [line.split()[1:] for line in table[2:]] == [["6", "/", "0", "(6l)"], ["6", "/", "0"]]
    assert f"marks: Nl {LEFT_SAID}" in ran.stdout
    # JUnit: a count of each case, and a line of its system-out where there were any.
    cases = {case.get("name"): case for case in ET.parse(junit).getroot().iter("testcase")}
    for name, count in ((f"{LEAVES} @ none", 6), (f"{SENDS} @ none", 0)):
        properties = {p.get("name"): p.get("value") for p in cases[name].iter("property")}
        assert properties["leftoverProcesses"] == str(count)
        assert (f"{count} {LEFT_SAID}" in (cases[name].findtext("system-out") or "")) == bool(count)
    assert_left_nothing(ran)


def test_load_replay_and_a_schedule_say_what_a_handlers_jobs_left(workdir: Path, pids: Path) -> None:
    load = run_testbed(["--handler", LEAVES, "--ops", "8", "--kill-rate", "0"], workdir, timeout=120, command="load")
    assert load.code == 0, load.stderr
    (row,) = load.json["rows"]
    assert row["leftoverProcesses"] == 8
    header, line = (lines := load.stdout.splitlines())[1].split(), lines[2].split()
    assert header[-2:] == ["left", "verdict"] and line[-2] == "8"
    assert f"left: {LEFT_SAID}" in load.stdout
    assert_left_nothing(load)

    args = ["--handler", LEAVES, "--ops", "4", "--every", "2", "--fault", "kill", "-b", "after-effect"]
    replay = run_testbed(args, workdir, timeout=120, command="replay")
    assert replay.code == 0, replay.stderr
    (row,) = replay.json["rows"]
    # One in its work-horse's group per attempt, a killed work-horse's too: each op's, and each kill's replay.
    assert row["leftoverProcesses"] == 4 + row["replays"] and row["kills"] == 2
    assert f"replays: {row['replays']}; {4 + row['replays']} {LEFT_SAID}" in replay.stdout
    assert left_alive(pids) == []
    assert_left_nothing(replay)

    (schedule := workdir / "schedule.json").write_text(
        json.dumps({"ops": [{"faults": [{"attempt": 1, "boundary": "after-effect", "fault": "kill"}]}, {}]})
    )
    replayed = run_testbed(["--schedule", str(schedule), "--handler", LEAVES, "--no-store"], workdir, timeout=120)
    assert replayed.code == 0, replayed.stderr
    assert replayed.stdout.split("\n\n")[0].splitlines()[-1] == f"  3 {LEFT_SAID}"  # 2 attempts of op 1, 1 of op 2
    assert left_alive(pids) == []
    assert_left_nothing(replayed)


def test_a_handlers_output_is_capped_per_attempt_in_the_store(workdir: Path) -> None:
    store = workdir / "store"
    args = ["--handler", "tests.support.userjobs:shouts", "-b", "none", "--ops", "3", "--workers", "1"]
    ran = run_testbed([*args, "--store", str(store)], workdir, timeout=120)
    assert ran.code == 0, ran.stderr
    (log,) = (store / ran.json["run"] / "logs" / "workers").glob("w*.log")
    text = log.read_text()
    assert len(text) < 3 * 70_000
    assert text.count("bytes of this work-horse's output cut; 65536 kept per attempt") == 3


def test_a_handler_that_exits_its_work_horse_is_a_failed_attempt(workdir: Path) -> None:
    args = ["--handler", "tests.support.userjobs:exits_at_once", "-b", "none", "--ops", "2", "--retries", "1"]
    ran = run_testbed([*args, "--cell-timeout", "600"], workdir, timeout=120)
    assert ran.code == 1, ran.stderr
    (row,) = ran.json["rows"]
    assert (row["effects"], row["missingOperations"]) == (0, 2)
    assert_left_nothing(ran)


def test_a_temp_dir_named_in_multibyte_characters_falls_back_to_tcp() -> None:
    base = tempfile.gettempdir()
    # The provider's socket, <dir>/tmp/testbed-<run id>-<8>/provider.sock, fits in characters, not in bytes.
    wide = 96 - len(base) - 1 - len("/tmp/testbed-20250101-120000-abcdef-abcdefgh/provider.sock") - len("tb-")
    if wide < 8:
        pytest.skip(f"the temp dir {base} is too long to tell characters from bytes")
    workdir = Path(tempfile.mkdtemp(prefix="tb-" + "é" * (wide - 9), dir=base))
    try:
        socket = workdir / "tmp" / "testbed-20250101-120000-abcdef-abcdefgh" / "provider.sock"
        assert len(str(socket)) < 100 < len(os.fsencode(socket))
        ran = run_testbed(["-s", "provider-key", "-b", "none", "--ops", "3"], workdir, timeout=120)
        assert ran.code == 0, ran.stderr
        assert_left_nothing(ran)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.mark.parametrize(
    ("loops", "said"),
    [
        (False, "handler tests.support.daemon_at_import:send: send is not callable (it is a int)"),
        (True, "importing tests.support.daemon_at_import:send took longer than 2 s (--import-timeout)"),
    ],
    ids=["the check ends", "past its deadline"],
)
def test_a_daemon_a_handler_leaves_at_import_is_stopped_with_the_check(
    workdir: Path, pids: Path, monkeypatch: pytest.MonkeyPatch, loops: bool, said: str
) -> None:
    """Out of the check's process group and session, its parent gone, deaf to SIGTERM."""
    if loops:
        monkeypatch.setenv("THEN_LOOP", "1")
    args = ["--handler", "tests.support.daemon_at_import:send", "--import-timeout", "2", "-b", "none", "--ops", "2"]
    ran = run_testbed(args, workdir, timeout=60)
    assert ran.code == 2
    assert ran.stderr.strip().splitlines() == [f"testbed: error: {said}"]
    assert len(list(pids.iterdir())) == 1 and left_alive(pids) == []
    assert_left_nothing(ran)
