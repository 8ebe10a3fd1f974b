"""A stored run read back, checked and not trusted: whether it is still going, ended or
was killed (its process holds a lock on its directory while it goes); its provider log
read without a byte written beside it; its history cut short or out of order refused;
its verdict never pass for a run the lab could not finish."""

import contextlib
import json
import os
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from provider.store import Store
from testbed.errors import RunFailure, UsageError
from testbed.experiment.matrix import Cell
from testbed.store import history, results
from testbed.store.formats import Mismatch
from testbed.store.runs import INTERRUPTED, RUNNING, RunStore, StoredLog, check_stored, unended
from tests.unit.test_stored_formats import document

CELL = history.cell_line("c001", "r.c001", Cell("retry-only", None))


def test_a_run_going_then_killed_is_listed_running_then_interrupted(tmp_path: Path) -> None:
    """A run in another process: running while it holds its directory, interrupted once it died."""
    store = RunStore(tmp_path)
    started, stop = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(stop)
            going = store.create("r1")
            going.record(CELL)  # buffered: a run killed outright loses up to a second of its history
            os.read(started, 1)  # until the test has looked
        finally:
            os._exit(0)  # dies as if killed: nothing of the run's is closed or flushed
    os.close(started)
    while not (tmp_path / "r1" / "history.jsonl").exists():  # made once the run holds its directory
        time.sleep(0.001)
    assert [(r.id, r.verdict) for r in store.runs()] == [("r1", RUNNING)]
    with pytest.raises(UsageError, match=r"r1 is a run still going"):
        check_stored(tmp_path / "r1")
    os.close(stop)
    os.waitpid(pid, 0)
    assert [(r.id, r.verdict, r.cells) for r in store.runs()] == [("r1", INTERRUPTED, "?")]
    assert store.resolve("r1") == (tmp_path / "r1").resolve()
    with pytest.raises(RunFailure, match=r"r1 is an incomplete run: it was interrupted .* after 0 cell\(s\) started"):
        check_stored(tmp_path / "r1")  # its history was not flushed: nothing of it reached the disk


def test_a_killed_runs_half_written_last_line_is_left_out(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text(CELL + CELL.replace("c001", "c002")[:40])
    assert unended(tmp_path) == INTERRUPTED
    assert [line.cell for line in history.read_history(tmp_path, interrupted=True)] == ["c001"]
    with pytest.raises(RunFailure, match=r"after 1 cell\(s\) started"):
        check_stored(tmp_path)
    with pytest.raises(Mismatch, match=r"history\.jsonl:2 does not match the history schema: invalid JSON"):
        list(history.read_history(tmp_path))  # in a run that ended, the same line is a damaged file


def test_a_line_of_a_cell_that_has_not_started_is_out_of_place(tmp_path: Path) -> None:
    event = '{"type":"anomaly","cell":"c002","text":"x"}\n'
    (tmp_path / "history.jsonl").write_text(CELL + event)
    with pytest.raises(UsageError, match=r"history\.jsonl:2 is out of place: cell c002 has no cell line before it"):
        list(history.read_history(tmp_path))


def test_a_run_whose_logs_were_kept_has_ended_its_missing_results_are_damage(tmp_path: Path) -> None:
    (tmp_path / "history.jsonl").write_text(CELL)
    (tmp_path / "logs").mkdir()
    assert unended(tmp_path) is None
    with pytest.raises(UsageError, match=r"cannot read .*results\.json: No such file or directory"):
        check_stored(tmp_path)


def wal_log(path: Path) -> None:
    """A provider's log as the provider leaves it: in WAL mode."""
    Store(path).close()
    # Closed here, not whenever it is collected: the last connection's close checkpoints the WAL.
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)


def test_a_stored_log_is_read_with_nothing_written_beside_it(tmp_path: Path) -> None:
    wal_log(tmp_path / "provider.sqlite3")
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    log = StoredLog(tmp_path / "provider.sqlite3")
    log.check()
    assert log.records("l", ["op-1"]) == {}
    log.close()
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # no -wal, no -shm


def test_the_store_keeps_the_log_as_one_file(tmp_path: Path) -> None:
    """A copy a reader needs nothing beside: not in WAL mode."""
    wal_log(tmp_path / "provider.sqlite3")
    run = RunStore(tmp_path).create("r1")
    run.keep_provider_log(tmp_path / "provider.sqlite3")
    run.close()
    kept = tmp_path / "r1" / "provider.sqlite3"
    assert kept.read_bytes()[18:20] == b"\x01\x01"  # the header's read and write versions: 1, rollback journal
    assert sorted(p.name for p in kept.parent.iterdir()) == ["history.jsonl", "provider.sqlite3"]


@pytest.mark.parametrize(
    ("damage", "said"),
    [
        (
            lambda p: p.write_bytes(b"\x00garbage" * 100),
            r"SQLite can read: file is not a database",
        ),
        (lambda p: p.write_bytes(b""), r"SQLite can read: no such table: effects"),
        (lambda p: (p.unlink(), p.mkdir()), r"cannot read .*provider\.sqlite3: a directory, not a regular file"),
    ],
    ids=["garbage", "empty", "a directory"],
)
def test_a_stored_log_sqlite_cannot_read_is_one_line_naming_it(
    tmp_path: Path, damage: Callable[[Path], object], said: str
) -> None:
    path = tmp_path / "provider.sqlite3"
    wal_log(path)
    damage(path)
    with pytest.raises(UsageError, match=said):
        StoredLog(path).check()


def test_an_incomplete_runs_verdict_is_incomplete_even_as_stored_before(tmp_path: Path) -> None:
    """Runs stored before the verdict said so have pass or fail beside incomplete: true."""
    written = document("the provider died")
    assert written["verdict"] == "incomplete"
    old = written | {"verdict": "pass"}
    (tmp_path / "r1").mkdir()
    (tmp_path / "r1" / "results.json").write_text(json.dumps(old))
    read = results.read(tmp_path / "r1" / "results.json")
    assert read.verdict == "pass" and read.judged_again([]).verdict == "incomplete"
    assert [r.verdict for r in RunStore(tmp_path).runs()] == ["incomplete"]
