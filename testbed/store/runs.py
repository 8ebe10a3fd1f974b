"""The run store: every run kept under `runs/<run-id>/`, with `runs/latest`.

A stored run holds the files of `testbed.store.layout.FILES`:
- `results.json`, as `--json` writes it (`testbed.store.results`);
- `history.jsonl`, written while the run goes: each cell as it starts, every
  event of every watched op, anomalies, and each op's local facts when its
  cell is judged; one line each, so a long run's memory stays flat
  (`testbed.store.history`);
- `provider.sqlite3`, a consistent copy of the provider's effect log; or, for
  a provider the run did not start (`--hosts`: its log stays on its host),
  `provider-records.jsonl`, what that provider's audit said of each op, as
  the run judged it, written with the op's local facts (`testbed.store.history`);
- `logs/`, the processes' logs;
- `report.html`, once `--report` or `testbed report` has written it;
- `digests.json`, the sha256 of every other file, written last (`testbed.store.digests`).

Every file is written through `testbed.store.files` (never through a planted
symlink); one the file system refuses breaks the store, and the run ends as
the lab's failure (exit 3). While the run goes its process holds a lock on
its directory: a directory with no results.json and no lock is a run killed
before its end (`unended`).

`testbed check`, `report` and `compare` trust a stored run only once
`check_stored` has found every file as the run stored it (`digests`: an edited
one is one line naming it, exit 2) and read it as its schema says (a damaged
file is one line naming it, exit 2); `check` then re-judges it from
`history.jsonl` and either of the provider's files alone. The formats'
modules are imported only where a run is read back: a run's start does
without them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import sqlite3
import stat
import sys
import time
import urllib.parse
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, TextIO, TypeVar

from provider.store import LogReader, ReferenceRecord
from testbed import inputs
from testbed.errors import RunFailure, UsageError
from testbed.store import digests, files
from testbed.store.files import Unwritable
from testbed.store.layout import DESTINATION_RECORDS, DIGESTS, HISTORY, LOGS, PROVIDER_LOG, PROVIDER_RECORDS, RESULTS

if TYPE_CHECKING:
    from testbed.judge.facts import ProviderRecords
    from testbed.store.results import Results

LATEST = "latest"

T = TypeVar("T")

_FLUSH_EVERY = 1.0  # seconds: a run killed outright loses at most this much of its history
_BUFFER = 1 << 16


class RunDir:
    """One run's directory, written while the run goes. Its run holds a lock on it until
    the run's process exits: a directory without results.json and without the lock is a
    run killed before its end. Every file is written through `testbed.store.files`; the first
    one the file system refuses breaks the store (`broken`), and every later write and
    `close` raise that Unwritable again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.broken: Unwritable | None = None
        self._lock = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        with contextlib.suppress(OSError):  # a file system without locks: the run shows as interrupted while it goes
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        self._history = _Stream(path / HISTORY)
        self._kept: dict[str, _Stream] = {}  # the files beside the history, each opened by its first line
        self._flushed = time.monotonic()

    def record(self, line: str) -> None:
        """A line of the history, as `testbed.store.history` writes it (cell_line, noted_line, facts_line)."""
        self._write(self._history, line)

    def keep_records(self, line: str) -> None:
        """What a provider the run did not start (its log stays on its host) said of
        some ops, as the run judged them (`testbed.store.history.records_line`)."""
        self._keep(PROVIDER_RECORDS, line)

    def keep_evidence(self, line: str) -> None:
        """What a real destination held for some ops, as the evidence reader answered
        (`testbed.store.evidence.evidence_line`)."""
        self._keep(DESTINATION_RECORDS, line)

    def _keep(self, name: str, line: str) -> None:
        if name not in self._kept:
            self._kept[name] = self._guarded(lambda: _Stream(self.path / name))
        self._write(self._kept[name], line)

    def _write(self, out: _Stream, line: str) -> None:
        self._guarded(lambda: out.write(line))
        if time.monotonic() - self._flushed > _FLUSH_EVERY:
            for stream in self._streams():
                self._guarded(stream.flush)
            self._flushed = time.monotonic()

    def _streams(self) -> list[_Stream]:
        return [self._history, *self._kept.values()]

    def _guarded(self, write: Callable[[], T]) -> T:
        """A write, unless the store is broken; the store broken by its Unwritable."""
        if self.broken is not None:
            raise self.broken
        try:
            return write()
        except Unwritable as exc:
            self.broken = exc
            raise

    def keep_provider_log(self, db: Path) -> None:
        """A consistent copy, WAL included, through SQLite's own backup, made beside the
        log (the run's private temp dir) and kept as one file (no WAL: a reader needs
        nothing beside it), then written into the store as every file is."""
        if not db.exists():
            return
        copy = files.temp_name(db)
        try:
            source, target = sqlite3.connect(f"file:{db}?mode=ro", uri=True), sqlite3.connect(copy)
            with contextlib.closing(source), contextlib.closing(target):
                source.backup(target)
                target.execute("PRAGMA journal_mode=DELETE")
            self._copy(copy, self.path / PROVIDER_LOG)
        except sqlite3.Error as exc:  # the run's own temp dir is full, or the log cannot be read
            raise Unwritable(copy, exc) from None
        finally:
            copy.unlink(missing_ok=True)

    def keep_logs(self, workdir: Path) -> None:
        for log in workdir.rglob("*.log"):
            destination = self.path / LOGS / log.relative_to(workdir)
            with contextlib.suppress(FileNotFoundError):  # a log that went with its process
                self._copy(log, destination)

    def _copy(self, source: Path, destination: Path) -> None:
        with open(source, "rb") as read:
            self._guarded(lambda: _written(destination, read))

    def keep_results(self, document: dict[str, Any]) -> None:
        """results.json, the run's last file, then the digests of every file (`digests`), the
        run's last write: the run has ended, and its lock goes."""
        from testbed.store import results

        self._guarded(lambda: results.write(self.path / RESULTS, document))
        self._guarded(lambda: digests.write(self.path))
        os.close(self._lock)

    def close(self) -> None:
        """Everything written, or the store's Unwritable (each file closed either way)."""
        for stream in self._streams():
            with contextlib.suppress(Unwritable):  # the first failure is the one to tell
                self._guarded(stream.close)
            stream.close_quietly()
        if self.broken is not None:
            raise self.broken

    def discard(self) -> None:
        """An interrupted run keeps nothing."""
        for stream in self._streams():
            stream.close_quietly()
        shutil.rmtree(self.path, ignore_errors=True)
        os.close(self._lock)


class _Stream:
    """A file of the run written a line at a time, made new under its own name: Unwritable,
    naming it, where the file system refuses a write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: TextIO = files.created(path, _BUFFER)

    def write(self, line: str) -> None:
        self._do(lambda: self._file.write(line))

    def flush(self) -> None:
        self._do(self._file.flush)

    def close(self) -> None:
        self._do(self._file.close)

    def close_quietly(self) -> None:
        """Closed, whatever was left unwritten (the descriptor is closed even where the flush fails)."""
        with contextlib.suppress(OSError):
            self._file.close()

    def _do(self, call: Callable[[], object]) -> None:
        try:
            call()
        except OSError as exc:
            raise Unwritable(self.path, exc) from None


def _written(destination: Path, source: IO[bytes]) -> None:
    try:
        destination.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise Unwritable(destination.parent, exc) from None
    with files.replaced(destination) as out:
        shutil.copyfileobj(source, out)


class StoredRecords:
    """provider-records.jsonl read back: answers as the provider's audit did. Every op the
    run judged has its record there: one without is a file cut short (UsageError)."""

    def __init__(self, run: Path) -> None:
        from testbed.store.history import read_provider_records

        self._path = run / PROVIDER_RECORDS
        self._ledgers: dict[str, dict[str, ReferenceRecord]] = {}
        for line in read_provider_records(run):
            self._ledgers.setdefault(line.ledger, {}).update(line.records)

    def held(self, ledger: str) -> int:
        """The ops of a ledger it has a record of."""
        return len(self._ledgers.get(ledger, {}))

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]:
        kept = self._ledgers.get(ledger, {})
        if lost := next((name for name in references if name not in kept), None):
            raise UsageError(f"{_shown(self._path)} has no record of op {lost} (ledger {ledger}): it is cut short")
        return {name: kept[name] for name in references}


class StoredLog(LogReader):
    """A stored run's provider.sqlite3, read as it is now. Opened immutable: SQLite takes no
    lock and makes no -wal or -shm beside it, so a check leaves the stored run as it was.
    A file SQLite cannot read as a provider's log is one line naming it (UsageError)."""

    def __init__(self, path: Path) -> None:
        self._path = path
        # What SQLite would only call a disk I/O error (a directory in its place, no permission), or hang on (a FIFO).
        try:
            inputs.opened(path).close()
        except inputs.InputError as exc:
            raise UsageError(f"cannot read {_shown(path)}: {exc}") from None
        uri = f"file:{urllib.parse.quote(str(path.absolute()))}?mode=ro&immutable=1"
        try:
            self._db = sqlite3.connect(uri, uri=True, check_same_thread=False)
        except sqlite3.Error as exc:
            raise self._damaged(exc) from None

    def check(self) -> None:
        """Every page readable, and the tables and columns the records are read from there."""
        try:
            problems = [row[0] for row in self._db.execute("PRAGMA quick_check")]
        except sqlite3.Error as exc:
            raise self._damaged(exc) from None
        if problems != ["ok"]:
            raise self._damaged(problems[0])
        self.records("", [""])

    def records(self, ledger: str, references: Iterable[str]) -> dict[str, ReferenceRecord]:
        try:
            return super().records(ledger, references)
        except sqlite3.Error as exc:
            raise self._damaged(exc) from None

    def _damaged(self, error: object) -> UsageError:
        return UsageError(f"{_shown(self._path)} is not a provider log SQLite can read: {error}")


@contextlib.contextmanager
def stored_provider(run: Path) -> Iterator[ProviderRecords]:
    """A stored run's provider side: its log copy, or what a provider it did not start said
    in its audit; checked whole first (UsageError, one line naming the file, where it is not)."""
    if os.path.lexists(run / PROVIDER_LOG):
        log = StoredLog(run / PROVIDER_LOG)
        with contextlib.closing(log):
            log.check()
            yield log
    elif os.path.lexists(run / PROVIDER_RECORDS):
        yield StoredRecords(run)
    else:
        either = f"{PROVIDER_LOG} or {PROVIDER_RECORDS}"
        raise UsageError(f"{_shown(run)} has no provider log ({either}): it cannot be checked")


class RunStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def check_writable(self) -> None:
        """Before any work: the store can be made and written."""
        existing = next((p for p in (self.root, *self.root.parents) if p.exists()), None)
        if existing is None or not existing.is_dir():
            raise UsageError(f"--store {self.root}: {existing} is not a directory")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise UsageError(f"--store {self.root}: {existing} is not writable")

    def create(self, run_id: str) -> RunDir:
        path = self.root / run_id
        try:
            path.mkdir(parents=True)
        except OSError as exc:
            raise Unwritable(path, exc) from None
        return RunDir(path)

    def mark_latest(self, run_id: str) -> None:
        """`latest` moved to the run in one rename (a new link under a name nobody can guess)."""
        link = self.root / LATEST
        try:
            temp = files.temp_name(link)
            temp.symlink_to(run_id)
            temp.replace(link)
        except OSError as exc:
            raise Unwritable(link, exc) from None

    def resolve(self, name: str) -> Path:
        """A run by id, `latest`, or a path to a stored run's directory (ended or not)."""
        for candidate in (Path(name), self.root / name):
            if _is_run(candidate):
                return candidate.resolve()
        raise UsageError(f"no stored run {name!r} (in {self.root}: see `testbed runs`)")

    def runs(self) -> Iterator[StoredRun]:
        if not self.root.is_dir():
            return
        for path in sorted(self.root.iterdir()):
            if path.is_dir() and not path.is_symlink() and _is_run(path):
                yield StoredRun.read(path)


def _is_run(path: Path) -> bool:
    """A run's directory: it has results.json, or the history a run writes from its start."""
    return path.is_dir() and any(os.path.lexists(path / name) for name in (RESULTS, HISTORY))


# What a stored run's directory says of the run besides its results.json (`unended`).
RUNNING = "running"
INTERRUPTED = "interrupted"


def unended(run: Path) -> str | None:
    """RUNNING for a run still going (its process holds the lock on its directory);
    INTERRUPTED for one killed before its end (history.jsonl, no results.json, no logs: a
    run copies its logs just before it writes results.json); None otherwise (a run that
    ended; its results.json, missing or not, tells the rest)."""
    if os.path.lexists(run / RESULTS):
        return None
    if _locked(run):
        return RUNNING
    return None if os.path.lexists(run / LOGS) else INTERRUPTED


def _locked(run: Path) -> bool:
    try:
        fd = os.open(run, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: str
    command: str
    started: str
    cells: str
    verdict: str
    bytes: int

    @classmethod
    def read(cls, path: Path) -> StoredRun:
        """What `testbed runs` lists of a stored run: ? for what it does not say; the verdict
        running, interrupted, damaged (results.json unreadable), incomplete, fail or pass."""
        from testbed.store import results

        size = _size(path)
        if (state := unended(path)) is not None:
            return cls(path.name, "?", "?", "?", state, size)
        try:
            found = results.read(path / RESULTS)
        except UsageError:
            return cls(path.name, "?", "?", "?", "damaged", size)
        verdict = "incomplete" if found.incomplete else found.verdict
        return cls(path.name, found.command or "?", found.started_at, str(len(found.rows)), verdict, size)


def _size(path: Path) -> int:
    """Bytes on disk under `path` (a file that goes meanwhile, as a running run's temp files do, counts 0)."""
    total = 0
    for found in path.rglob("*"):
        with contextlib.suppress(OSError):
            info = found.lstat()
            total += info.st_size if stat.S_ISREG(info.st_mode) else 0
    return total


def check_stored(run: Path) -> Results:
    """A stored run's results, once every file of it has been read and found as its schema
    says (results.json, each line of history.jsonl, the provider's log or records, a destination's
    records), and as the
    run stored it (`digests`): one line naming the damaged or edited file where one is not
    (UsageError, exit 2); a run stored before digests were kept is read with a warning. A run
    still going is refused (UsageError); one killed before its end is said to be incomplete
    (RunFailure, exit 3)."""
    from testbed.store import results

    state = unended(run)
    if state == RUNNING:
        raise UsageError(f"{_shown(run)} is a run still going: it can be read once it has ended")
    if state == INTERRUPTED:
        started = len(_Tally.of(run, interrupted=True).ledgers)
        raise RunFailure(
            f"{_shown(run)} is an incomplete run: it was interrupted before it wrote its {RESULTS} (killed, or its"
            f" store could not be written) after {started} cell(s) started: nothing of it can be judged"
        )
    found = results.read(run / RESULTS)
    tally = _Tally.of(run)
    # A row's intended ops: the run's --ops, or a trial's own count (explore, --schedule).
    judged = [(row.cell, row.intended) for row in found.rows if row.cell is not None]  # the oldest runs name none
    for cell, ops in judged:
        if missing := tally.cut_short(cell, ops):
            raise UsageError(f"{_shown(run / HISTORY)} {missing}: it is cut short")
    if found.incomplete and not any(os.path.lexists(run / name) for name in (PROVIDER_LOG, PROVIDER_RECORDS)):
        # The lab failed before it could keep the log (its temp dir full, say): its own failure, as the run said.
        raise RunFailure(
            f"{_shown(run)} is an incomplete run: {found.failure or 'a part of the lab failed'}; its provider log"
            f" was not kept, so none of its {len(judged)} judged cell(s) can be checked"
        )
    with stored_provider(run) as provider:
        if isinstance(provider, StoredRecords):  # every op judged has its record: fewer, a file cut short
            tally.check_held(run / PROVIDER_RECORDS, provider.held, judged)
    if found.options.destination is not None:
        from testbed.store.evidence import StoredEvidence

        if not os.path.lexists(run / DESTINATION_RECORDS):
            raise UsageError(
                f"{_shown(run)} ran against --destination {found.options.destination.url} but has no"
                f" {DESTINATION_RECORDS}: its destination's records were not kept, so it cannot be checked"
            )
        tally.check_held(run / DESTINATION_RECORDS, StoredEvidence(run).held, judged)
    # Each file read as its schema says first (what is wrong with a damaged one is said best there), then
    # every file as the run stored it: an edit that keeps to the schemas (a verdict flipped) is refused too.
    if not digests.verify(run):
        print(
            f"testbed: warning: {_shown(run)} has no {DIGESTS}: stored before runs had one (or it was"
            " removed), so an edit of its files cannot be told",
            file=sys.stderr,
        )
    return found


@dataclass(slots=True)
class _Tally:
    """A history read whole (each line checked): each cell started, with its ledger; its facts
    lines (one per op it judged) and the ops they name (the same op made again included)."""

    ledgers: dict[str, str] = field(default_factory=dict)
    facts: Counter[str] = field(default_factory=Counter)
    ops: Counter[str] = field(default_factory=Counter)

    @classmethod
    def of(cls, run: Path, interrupted: bool = False) -> _Tally:
        from testbed.store import history

        tally = cls()
        for line in history.read_history(run, interrupted=interrupted):
            if isinstance(line, history.CellLine):
                tally.ledgers[line.cell] = line.ledger
            elif isinstance(line, history.FactsLine):
                tally.facts[line.cell] += 1
                tally.ops[line.cell] += len(line.ops)
        return tally

    def check_held(self, path: Path, held: Callable[[str], int], judged: list[tuple[str, int]]) -> None:
        """A file beside the history with an answer for every op judged (`held`: of a ledger's ops);
        UsageError, one line naming it, where it has fewer: it is cut short."""
        for cell, _ in judged:
            if (count := held(self.ledgers[cell])) < self.ops[cell]:
                said = f"has the records of {count} of the {self.ops[cell]} ops cell {cell} judged"
                raise UsageError(f"{_shown(path)} {said}: it is cut short")

    def cut_short(self, cell: str, ops: int) -> str | None:
        """What the history lacks of a judged cell: its cell line, or the facts line of each of its ops."""
        if cell not in self.ledgers:
            return f"has no line of cell {cell}, which {RESULTS} has a row of"
        if self.facts[cell] != ops:
            return f"holds the facts of {self.facts[cell]} of cell {cell}'s {ops} ops"
        return None


def _shown(path: Path) -> str:
    from testbed.store.formats import shown

    return shown(path)
