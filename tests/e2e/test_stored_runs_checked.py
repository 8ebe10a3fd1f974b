"""Stored runs checked, not trusted: `check`, `report` and `compare` on a damaged run say in
one line which file is damaged (exit 2, never a traceback, never the "cell differs" code);
a run the lab could not finish is incomplete (exit 3), never pass; a run killed outright is
listed as interrupted, and a stored run is left as it was, byte for byte."""

import contextlib
import hashlib
import json
import os
import random
import shutil
import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol

import pytest

from provider.store import LogReader, ReferenceRecord
from testbed.cli import app
from testbed.store import digests, history
from tests.support.helpers import assert_left_nothing, descendants, run_testbed, start_testbed, still_running

pytestmark = pytest.mark.e2e

SMALL = ["--ops", "10", "-s", "retry-only", "-b", "none", "-b", "after-effect"]


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small stored run (two cells), as a run on its own provider keeps it."""
    workdir = tmp_path_factory.mktemp("stored")
    ran = run_testbed(SMALL, workdir)
    assert ran.code == 0, ran.stderr
    run: str = ran.json["run"]
    return workdir / "runs" / run


def as_remote(run: Path) -> None:
    """The run as one on a provider it did not start keeps it: what the provider said of each
    op it judged in provider-records.jsonl, in place of the provider's log."""
    ledgers, lines = {}, []
    log = LogReader(run / "provider.sqlite3")
    for line in history.read_history(run):
        if isinstance(line, history.CellLine):
            ledgers[line.cell] = line.ledger
        elif isinstance(line, history.FactsLine):
            ops = [o.op for o in line.ops]
            said = log.records(ledgers[line.cell], ops)
            lines.append(history.records_line(ledgers[line.cell], {op: said.get(op, ReferenceRecord()) for op in ops}))
    log.close()
    (run / "provider.sqlite3").unlink()
    (run / "provider-records.jsonl").write_text("".join(lines))
    digests.write(run)  # as such a run stores them


def copied(stored: Path, to: Path, remote: bool = False) -> Path:
    copy = to / "run"
    shutil.copytree(stored, copy)
    if remote:
        as_remote(copy)
    return copy


class Command(Protocol):
    """A stored-run command, run in this process: its exit code (SystemExit's), stdout, stderr."""

    def __call__(self, *args: str) -> tuple[int | str | None, str, str]: ...


@pytest.fixture
def command(capsys: pytest.CaptureFixture[str]) -> Iterator[Command]:
    """A stored-run command as `testbed` runs it, in this process: its exit code, stdout, stderr."""
    sigterm = signal.getsignal(signal.SIGTERM)

    def run(*args: str) -> tuple[int | str | None, str, str]:
        with pytest.raises(SystemExit) as exited:
            app.main(list(args))
        said = capsys.readouterr()
        return exited.value.code, said.out, said.err

    yield run
    signal.signal(signal.SIGTERM, sigterm)  # the command line's own handler goes with it


def truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def lines_cut(path: Path) -> None:
    """Cut at a line's end: every line left is whole, and matches its schema."""
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: len(lines) // 2]))


def garbage(path: Path) -> None:
    path.write_bytes(random.Random(47).randbytes(4096))


def missing(path: Path) -> None:
    path.unlink()


def directory(path: Path) -> None:
    path.unlink()
    path.mkdir()


def fifo(path: Path) -> None:
    """Opened as a file, it would wait for a writer for ever."""
    path.unlink()
    os.mkfifo(path)


def zeros(path: Path) -> None:
    """Read whole, it would take all the memory."""
    path.unlink()
    path.symlink_to("/dev/zero")


def huge(path: Path) -> None:
    """Past any cap, and no line end in it: 2 GB, sparse, most of it nothing."""
    with path.open("r+b") as out:
        out.truncate(2 << 30)


DAMAGES: list[tuple[str, Callable[[Path], None]]] = [
    ("truncated", truncated),
    ("garbage", garbage),
    ("missing", missing),
    ("a directory", directory),
    ("a FIFO", fifo),
    ("a link to /dev/zero", zeros),
    ("huge", huge),
]
CASES = [
    pytest.param(name, damage, id=f"{name}-{how}")
    for name in ("results.json", "history.jsonl", "provider.sqlite3", "provider-records.jsonl")
    for how, damage in DAMAGES
    # SQLite reads the pages its header names, on demand: zeros past them are no damage.
    if (name, how) != ("provider.sqlite3", "huge")
]
CASES += [
    pytest.param(name, lines_cut, id=f"{name}-cut at a line") for name in ("history.jsonl", "provider-records.jsonl")
]


def test_a_remote_style_copy_checks_as_the_run(stored: Path, tmp_path: Path, command: Command) -> None:
    """What the damage tests below start from, whole: the same verdict as the run's."""
    code, out, err = command("check", str(copied(stored, tmp_path, remote=True)))
    assert code == 0 and err == "" and "2/2 cells as expected" in out


@pytest.mark.parametrize(("name", "damage"), CASES)
def test_a_damaged_file_is_named_in_one_line_by_check_report_and_compare(
    stored: Path, tmp_path: Path, command: Command, name: str, damage: Callable[[Path], None]
) -> None:
    run = copied(stored, tmp_path, remote=name == "provider-records.jsonl")
    damage(run / name)
    for args in (["check", str(run)], ["report", str(run)], ["compare", str(stored), str(run)]):
        code, out, err = command(*args)
        assert (code, out) == (2, ""), f"{args[0]}: exit {code}\n{out}{err}"
        assert err.startswith("testbed: error: ") and err.count("\n") == 1, err
        assert name in err, f"{args[0]} does not name {name}: {err}"
    assert not (run / "report.html").exists()


@pytest.mark.parametrize("damage", [fifo, zeros, huge])
def test_runs_lists_a_run_whose_results_cannot_be_read_as_damaged(
    stored: Path, tmp_path: Path, command: Command, damage: Callable[[Path], None]
) -> None:
    run = copied(stored, tmp_path)
    damage(run / "results.json")
    code, out, err = command("runs", "--store", str(tmp_path))
    assert (code, err) == (0, "")
    (listed,) = out.splitlines()[1:]
    assert listed.split()[:2] == ["run", "?"] and "damaged" in listed.split(), out


def test_report_refuses_a_page_that_is_not_a_regular_file(stored: Path, tmp_path: Path, command: Command) -> None:
    """A FIFO at report.html is neither written through (it would wait for a reader) nor replaced."""
    run = copied(stored, tmp_path)
    os.mkfifo(run / "report.html")
    code, out, err = command("report", str(run))
    assert (code, out) == (2, "")
    assert err == f"testbed: error: report {run / 'report.html'}: a FIFO, not a regular file\n"
    assert (run / "report.html").is_fifo()


def checksums(run: Path) -> dict[str, str]:
    return {str(p.relative_to(run)): hashlib.sha256(p.read_bytes()).hexdigest() for p in run.rglob("*") if p.is_file()}


def test_check_report_and_compare_leave_a_stored_run_as_it_was(stored: Path, tmp_path: Path, command: Command) -> None:
    """Byte for byte, and nothing beside its provider log (no -wal, no -shm): report adds its page only."""
    run = copied(stored, tmp_path)
    before = checksums(run)
    assert command("check", str(run))[0] == 0
    assert command("compare", str(run), str(stored))[0] == 0
    assert command("report", str(run))[0] == 0
    after = checksums(run)
    assert after.pop("report.html") and after == before


def test_a_run_the_lab_could_not_finish_is_incomplete_never_pass(workdir: Path) -> None:
    """Its second cell outlives the cell timeout (RQ's own recovery of a worker killed whole
    takes a minute): the run ends with exit 3, and `check` says so again, with the first cell judged."""
    args = [*SMALL, "-f", "kill-worker", "--recovery", "rq", "--cell-timeout", "3", "--parallel", "1"]
    ran = run_testbed(args, workdir)
    assert ran.code == 3, ran.stderr
    results = ran.json
    assert results["incomplete"] is True and results["verdict"] == "incomplete"
    assert [r["boundary"] for r in results["rows"]] == ["none"] and len(results["notRun"]) == 1
    stored = json.loads((workdir / "runs" / results["run"] / "results.json").read_text())
    assert stored["verdict"] == "incomplete"
    checked = run_testbed(["latest"], workdir, command="check")
    assert checked.code == 3, checked.stdout + checked.stderr
    assert checked.stdout.splitlines()[-1].startswith(
        f"incomplete run: {results['failure']}; 1/1 judged cell(s) as expected, 1 not run"
    )
    listed = run_testbed([], workdir, command="runs")
    assert listed.stdout.splitlines()[1].split()[:5] == [
        results["run"],
        "chaos",
        results["startedAt"],
        "1",
        "incomplete",
    ]
    assert_left_nothing(ran)


def test_a_run_killed_outright_is_listed_as_interrupted_and_checked_as_incomplete(workdir: Path) -> None:
    proc, _, err = start_testbed(["--ops", "3000", "-s", "retry-only", "-b", "none", "--parallel", "1"], workdir)
    seen: set[tuple[int, float]] = set()
    deadline = time.monotonic() + 90
    while "testbed run " not in err.read_text():  # its stack is up: its run directory is there
        seen |= descendants(proc.pid)
        assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
        time.sleep(0.05)
    run = workdir / "runs" / err.read_text().split("testbed run ", 1)[1].split(":", 1)[0]
    seen |= descendants(proc.pid)
    aside = workdir / "aside"  # the stored-run commands' own stdout and stderr, apart from the run's
    aside.mkdir()
    store = ["--store", str(workdir / "runs")]
    listed = run_testbed(store, aside, command="runs")
    assert proc.poll() is None, "the run ended before it could be seen going"
    assert listed.stdout.splitlines()[1].split()[:5] == [run.name, "?", "?", "?", "running"]
    going = run_testbed([str(run)], aside, command="check")
    assert (
        going.code == 2
        and going.stderr == f"testbed: error: {run} is a run still going: it can be read once it has ended\n"
    )

    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 3  # its children die with it (the kernel's death signal)
    while still_running(seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert still_running(seen) == []
    listed = run_testbed(store, aside, command="runs")
    assert listed.stdout.splitlines()[1].split()[:5] == [run.name, "?", "?", "?", "interrupted"]
    for command in ("check", "report"):
        checked = run_testbed([str(run)], aside, command=command)
        assert checked.code == 3 and "Traceback" not in checked.stderr, checked.stderr
        assert checked.stderr.startswith(f"testbed: error: {run} is an incomplete run: it was interrupted before it")


def _flipped_verdict(run: Path) -> None:
    """One of retry-only's duplicates at after-effect gone from the log: the cell passes no more."""
    with contextlib.closing(sqlite3.connect(run / "provider.sqlite3")) as db, db:
        db.execute("DELETE FROM effects WHERE id = (SELECT MAX(id) FROM effects)")


def _results_edited(run: Path) -> None:
    """As its schema allows: the run's own words of its verdict."""
    document = json.loads((run / "results.json").read_text())
    document["rows"][0]["wallSeconds"] += 1.0
    (run / "results.json").write_text(json.dumps(document, indent=2))


def _history_edited(run: Path) -> None:
    """An event a millisecond later: every line still as its schema says."""
    lines = (run / "history.jsonl").read_text().splitlines(keepends=True)
    at = next(i for i, line in enumerate(lines) if '"type":"event"' in line)
    event = json.loads(lines[at])
    lines[at] = json.dumps(event | {"at": event["at"] + 0.001}, separators=(",", ":")) + "\n"
    (run / "history.jsonl").write_text("".join(lines))


def _log_appended(run: Path) -> None:
    with (run / "logs" / "provider.log").open("a") as out:
        out.write("edited\n")


def _file_added(run: Path) -> None:
    (run / "evidence.jsonl").write_text("{}\n")


def _linked(run: Path) -> None:
    """The same bytes, through a link the run never made."""
    (run / "elsewhere.log").write_bytes((run / "logs" / "provider.log").read_bytes())
    (run / "logs" / "provider.log").unlink()
    (run / "logs" / "provider.log").symlink_to(run / "elsewhere.log")


def _digests_garbled(run: Path) -> None:
    (run / "digests.json").write_text('{"algorithm": "md5", "files": {}}')


@pytest.mark.parametrize(
    ("edit", "said"),
    [
        (_flipped_verdict, "provider.sqlite3 is not as the run stored it: its sha256 differs from digests.json's"),
        (_results_edited, "results.json is not as the run stored it: its sha256 differs from digests.json's"),
        (_history_edited, "history.jsonl is not as the run stored it: its sha256 differs from digests.json's"),
        (_log_appended, "provider.log is not as the run stored it: its sha256 differs from digests.json's"),
        (_file_added, "evidence.jsonl was not stored by the run: digests.json does not list it"),
        (_linked, "provider.log: a symbolic link, not a file the run stored"),
        (_digests_garbled, "digests.json is not a manifest of sha256 digests, as the run writes it"),
    ],
)
def test_an_edited_stored_run_is_refused_in_one_line_by_check_report_and_compare(
    stored: Path, tmp_path: Path, command: Command, edit: Callable[[Path], None], said: str
) -> None:
    run = copied(stored, tmp_path)
    edit(run)
    for args in (["check", str(run)], ["report", str(run)], ["compare", str(stored), str(run)]):
        code, out, err = command(*args)
        assert (code, out) == (2, ""), f"{args[0]}: exit {code}\n{out}{err}"
        (line,) = err.splitlines()
        assert line.startswith("testbed: error: ") and line.endswith(said), line
    assert not (run / "report.html").exists()


def test_a_run_stored_before_digests_is_checked_with_a_warning(stored: Path, tmp_path: Path, command: Command) -> None:
    run = copied(stored, tmp_path)
    (run / "digests.json").unlink()
    _flipped_verdict(run)  # what a manifest would have told: without one, it is judged as it is now
    code, out, err = command("check", str(run))
    assert code == 1 and "1/2 cells as expected" in out, out
    assert err == (
        f"testbed: warning: {run} has no digests.json: stored before runs had one (or it was removed),"
        " so an edit of its files cannot be told\n"
    )


def test_a_fresh_run_digests_every_file_it_stores_but_its_report(stored: Path) -> None:
    listed = json.loads((stored / "digests.json").read_text())
    assert listed["algorithm"] == "sha256"
    on_disk = checksums(stored)
    on_disk.pop("digests.json")
    on_disk.pop("report.html", None)
    assert listed["files"] == on_disk
    assert {"results.json", "history.jsonl", "provider.sqlite3", "logs/provider.log"} <= set(on_disk)
