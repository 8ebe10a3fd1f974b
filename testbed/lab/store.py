"""The run store: every run kept under `runs/<run-id>/`, with `runs/latest`.

A stored run holds
- `results.json`, as `--json` writes it;
- `history.jsonl`, written while the run goes: each cell as it starts, every
  event of every watched op, anomalies, and each op's local facts (what the
  application concluded, its attempts, whether RQ gave up on its job) when its
  cell is judged; one line each, so a long run's memory stays flat;
- `provider.sqlite3`, a consistent copy of the provider's effect log; or, for
  a provider the run did not start (`--hosts`: its log stays on its host),
  `provider-records.jsonl`, what that provider's audit said of each op, as
  the run judged it, written with the op's local facts;
- `logs/`, the processes' logs.

`testbed check` re-judges a stored run from `history.jsonl` and either of
the provider's files alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from provider.store import ReferenceRecord
from testbed.errors import UsageError

LATEST = "latest"
RESULTS = "results.json"
HISTORY = "history.jsonl"
PROVIDER_LOG = "provider.sqlite3"
PROVIDER_RECORDS = "provider-records.jsonl"
LOGS = "logs"
REPORT = "report.html"

# Line types of history.jsonl.
CELL, EVENT, ANOMALY, FACTS = "cell", "event", "anomaly", "facts"

_FLUSH_EVERY = 1.0  # seconds: a run killed outright loses at most this much of its history


class RunDir:
    """One run's directory, written while the run goes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._history: IO[str] = open(path / HISTORY, "a", buffering=1 << 16)  # noqa: SIM115 (closed in close())
        self._records: IO[str] | None = None  # opened by the first keep_records
        self._flushed = time.monotonic()

    def record(self, kind: str, **fields: Any) -> None:
        self._write(self._history, {"type": kind, **fields})

    def keep_records(self, ledger: str, records: dict[str, ReferenceRecord]) -> None:
        """What a provider the run did not start (its log stays on its host) said of
        these ops, as the run judged them."""
        if self._records is None:
            self._records = open(self.path / PROVIDER_RECORDS, "a", buffering=1 << 16)  # noqa: SIM115
        self._write(self._records, {"ledger": ledger, "records": {op: asdict(r) for op, r in records.items()}})

    def _write(self, out: IO[str], line: dict[str, Any]) -> None:
        out.write(json.dumps(line, separators=(",", ":")) + "\n")
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

    def __init__(self, path: Path) -> None:
        self._ledgers: dict[str, dict[str, ReferenceRecord]] = {}
        try:
            with open(path) as lines:
                for line in lines:
                    entry = json.loads(line)
                    found = {name: ReferenceRecord(**counts) for name, counts in entry["records"].items()}
                    self._ledgers.setdefault(entry["ledger"], {}).update(found)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise UsageError(f"{path}: not a provider's records as the lab keeps them ({exc})") from None

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
        try:
            results = json.loads((path / RESULTS).read_text())
        except (OSError, ValueError):
            results = {}
        verdict = "incomplete" if results.get("incomplete") else str(results.get("verdict", "?"))
        size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        return cls(
            path.name,
            str(results.get("command", "?")),
            str(results.get("startedAt", "?")),
            len(results.get("rows", [])),
            verdict,
            size,
        )


def read_history(path: Path) -> Iterator[dict[str, Any]]:
    """A stored run's history, a line at a time."""
    with open(path / HISTORY) as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)
