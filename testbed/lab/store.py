"""The run store: every run kept under `runs/<run-id>/`, with `runs/latest`.

A stored run holds the files of `testbed.lab.layout.FILES`:
- `results.json`, as `--json` writes it (`testbed.lab.results`);
- `history.jsonl`, written while the run goes: each cell as it starts, every
  event of every watched op, anomalies, and each op's local facts when its
  cell is judged; one line each, so a long run's memory stays flat
  (`testbed.lab.history`);
- `provider.sqlite3`, a consistent copy of the provider's effect log; or, for
  a provider the run did not start (`--hosts`: its log stays on its host),
  `provider-records.jsonl`, what that provider's audit said of each op, as
  the run judged it, written with the op's local facts (`testbed.lab.history`);
- `logs/`, the processes' logs;
- `report.html`, once `--report` or `testbed report` has written it.

`testbed check` re-judges a stored run from `history.jsonl` and either of
the provider's files alone, once `check_stored` has found its files as their
schemas say. The formats' modules are imported only where a run is read back:
a run's start does without them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from testbed.errors import UsageError
from testbed.lab.layout import HISTORY, LOGS, PROVIDER_LOG, PROVIDER_RECORDS, RESULTS

if TYPE_CHECKING:
    from provider.store import ReferenceRecord
    from testbed.lab.results import Results

LATEST = "latest"

_FLUSH_EVERY = 1.0  # seconds: a run killed outright loses at most this much of its history


class RunDir:
    """One run's directory, written while the run goes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._history: IO[str] = open(path / HISTORY, "a", buffering=1 << 16)  # noqa: SIM115 (closed in close())
        self._records: IO[str] | None = None  # opened by the first keep_records
        self._flushed = time.monotonic()

    def record(self, line: str) -> None:
        """A line of the history, as `testbed.lab.history` writes it (cell_line, noted_line, facts_line)."""
        self._write(self._history, line)

    def keep_records(self, line: str) -> None:
        """What a provider the run did not start (its log stays on its host) said of
        some ops, as the run judged them (`testbed.lab.history.records_line`)."""
        if self._records is None:
            self._records = open(self.path / PROVIDER_RECORDS, "a", buffering=1 << 16)  # noqa: SIM115
        self._write(self._records, line)

    def _write(self, out: IO[str], line: str) -> None:
        out.write(line)
        if time.monotonic() - self._flushed > _FLUSH_EVERY:
            for file in (self._history, self._records):
                if file is not None:
                    file.flush()
            self._flushed = time.monotonic()

    def keep_provider_log(self, db: Path) -> None:
        """A consistent copy, WAL included, through SQLite's own backup."""
        if not db.exists():
            return
        source = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        target = sqlite3.connect(self.path / PROVIDER_LOG)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    def keep_logs(self, workdir: Path) -> None:
        logs = self.path / LOGS
        for log in workdir.rglob("*.log"):
            destination = logs / log.relative_to(workdir)
            destination.parent.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(OSError):
                shutil.copyfile(log, destination)

    def close(self) -> None:
        self._history.close()
        if self._records is not None:
            self._records.close()

    def discard(self) -> None:
        """An interrupted run keeps nothing."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


class StoredRecords:
    """provider-records.jsonl read back: answers as the provider's audit did."""

    def __init__(self, run: Path) -> None:
        from testbed.lab.history import read_provider_records

        self._ledgers: dict[str, dict[str, ReferenceRecord]] = {}
        for line in read_provider_records(run):
            self._ledgers.setdefault(line.ledger, {}).update(line.records)

    def records(self, ledger: str, references: list[str]) -> dict[str, ReferenceRecord]:
        kept = self._ledgers.get(ledger, {})
        return {name: kept[name] for name in references if name in kept}


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
        path.mkdir(parents=True)
        return RunDir(path)

    def mark_latest(self, run_id: str) -> None:
        link = self.root / LATEST
        tmp = self.root / f".{LATEST}.{run_id}"
        tmp.symlink_to(run_id)
        tmp.replace(link)

    def resolve(self, name: str) -> Path:
        """A run by id, `latest`, or a path to a stored run's directory."""
        for candidate in (Path(name), self.root / name):
            if (candidate / RESULTS).is_file():
                return candidate.resolve()
        raise UsageError(f"no stored run {name!r} (in {self.root}: see `testbed runs`)")

    def runs(self) -> Iterator[StoredRun]:
        if not self.root.is_dir():
            return
        for path in sorted(self.root.iterdir()):
            if path.is_dir() and not path.is_symlink() and (path / RESULTS).is_file():
                yield StoredRun.read(path)


@dataclass(frozen=True, slots=True)
class StoredRun:
    id: str
    command: str
    started: str
    cells: int
    verdict: str
    bytes: int

    @classmethod
    def read(cls, path: Path) -> StoredRun:
        """What `testbed runs` lists of a stored run: ? for what its results.json does not say."""
        from testbed.lab import results

        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        try:
            found = results.read(path / RESULTS)
        except UsageError:
            return cls(path.name, "?", "?", 0, "?", size)
        verdict = "incomplete" if found.incomplete else found.verdict
        return cls(path.name, found.command or "?", found.started_at, len(found.rows), verdict, size)


def check_stored(run: Path) -> Results:
    """A stored run's results, once every record of it is as its schema says (results.json,
    each line of history.jsonl and of provider-records.jsonl): Mismatch (one line) where
    one is not."""
    from testbed.lab import history, results

    found = results.read(run / RESULTS)
    for _ in history.read_history(run):
        pass
    if (run / PROVIDER_RECORDS).is_file():
        for _ in history.read_provider_records(run):
            pass
    return found
