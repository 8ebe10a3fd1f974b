"""The provider's durable effect log: the ledger state machine persisted in
SQLite (WAL mode).

Every operation of `provider.ledger` runs under one lock, and those that
write run inside one transaction: reading the stored key, claiming it as in
flight, and later appending the effect and the key's response. Two concurrent
requests with the same key can therefore never both append.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from labcore.destination import Destination, Effects
from provider import ledger as machine
from provider.contract import Contract, EffectRow, StoredKey
from provider.ledger import Answer, Claims, Read, SendOutcome, SendTicket

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS ledgers (
    name TEXT PRIMARY KEY,
    contract TEXT NOT NULL,
    clock_offset REAL NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS effects (
    id INTEGER PRIMARY KEY,
    ledger TEXT NOT NULL,
    reference TEXT NOT NULL,
    idem_key TEXT,
    fingerprint TEXT NOT NULL,
    body TEXT NOT NULL,
    applied_at REAL NOT NULL,
    withdrawn_at REAL
);
CREATE INDEX IF NOT EXISTS effects_by_reference ON effects (ledger, reference);
CREATE TABLE IF NOT EXISTS idempotency_keys (
    ledger TEXT NOT NULL,
    key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    status INTEGER NOT NULL,
    response TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (ledger, key)
) WITHOUT ROWID; -- one b-tree to write per send, not a table and its index
-- Every send and what became of it.
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    ledger TEXT NOT NULL,
    reference TEXT NOT NULL,
    idem_key TEXT,
    attempt INTEGER,
    outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_by_reference ON requests (ledger, reference);
-- The secret each ledger's scoped URLs (users' jobs) are signed with.
CREATE TABLE IF NOT EXISTS scope_secrets (
    ledger TEXT PRIMARY KEY,
    secret TEXT NOT NULL
);
-- The real destination a ledger's jobs' requests are forwarded to (provider.forward), and its effect rules.
CREATE TABLE IF NOT EXISTS destinations (
    ledger TEXT PRIMARY KEY,
    url TEXT NOT NULL,
    effects TEXT NOT NULL
);
-- Every request forwarded to a destination, and its answer's status (0: none came back).
CREATE TABLE IF NOT EXISTS forwards (
    id INTEGER PRIMARY KEY,
    ledger TEXT NOT NULL,
    reference TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    effect INTEGER NOT NULL,
    status INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS forwards_by_reference ON forwards (ledger, reference);
-- Reads are counted, not logged: a read costs no storage beyond its reference's counter.
CREATE TABLE IF NOT EXISTS reads (
    ledger TEXT NOT NULL,
    reference TEXT NOT NULL,
    kind TEXT NOT NULL,
    count INTEGER NOT NULL,
    PRIMARY KEY (ledger, reference, kind)
);
"""


def connect(path: Path | str, *, readonly: bool = False) -> sqlite3.Connection:
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode survives a crash of the process (not of the host).
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.executescript(SCHEMA)
    conn.execute("PRAGMA busy_timeout=5000")
    return conn


class UnknownLedger(KeyError):
    pass


class _SqliteLedger:
    """`provider.ledger.LedgerState` over the store's tables, for one ledger."""

    def __init__(self, db: sqlite3.Connection, name: str, contract: Contract, offset: float) -> None:
        self._db = db
        self.name = name
        self.contract = contract
        self.offset = offset
        self.claims = Claims()

    def now(self) -> float:
        return time.time() + self.offset

    def stored_key(self, key: str) -> StoredKey | None:
        row = self._db.execute(
            "SELECT fingerprint, status, response, created_at FROM idempotency_keys WHERE ledger = ? AND key = ?",
            (self.name, key),
        ).fetchone()
        return None if row is None else StoredKey(row[0], row[1], json.loads(row[2]), row[3])

    def key_in_flight(self, key: str) -> bool:
        return self.claims.key_in_flight(key)

    def reference_in_flight(self, reference: str) -> bool:
        return self.claims.reference_in_flight(reference)

    def effects(self, reference: str) -> list[EffectRow]:
        rows = self._db.execute(
            "SELECT id, fingerprint, applied_at, withdrawn_at FROM effects WHERE ledger = ? AND reference = ? "
            "ORDER BY id",
            (self.name, reference),
        )
        return [EffectRow(r[0], r[1], r[2], r[3] is not None) for r in rows]

    def claim(self, key: str | None, reference: str) -> None:
        self.claims.claim(key, reference)

    def unclaim(self, key: str | None, reference: str) -> None:
        self.claims.unclaim(key, reference)

    def append_effect(self, ticket: SendTicket, body: dict[str, Any], at: float) -> int:
        cursor = self._db.execute(
            "INSERT INTO effects (ledger, reference, idem_key, fingerprint, body, applied_at) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (self.name, ticket.reference, ticket.key, ticket.fingerprint, json.dumps(body), at),
        )
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    def store_key(self, key: str, stored: StoredKey) -> None:
        self._db.execute(
            "INSERT OR REPLACE INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?)",
            (self.name, key, stored.fingerprint, stored.status, json.dumps(stored.response), stored.created_at),
        )

    def record_send(self, ticket: SendTicket, outcome: SendOutcome, status: int, at: float) -> None:
        self._db.execute(
            "INSERT INTO requests (ledger, reference, idem_key, attempt, outcome, status, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (self.name, ticket.reference, ticket.key, ticket.attempt, outcome.value, status, at),
        )

    def count_read(self, reference: str, read: Read) -> None:
        self._db.execute(
            "INSERT INTO reads VALUES (?, ?, ?, 1) "
            "ON CONFLICT(ledger, reference, kind) DO UPDATE SET count = count + 1",
            (self.name, reference, read.value),
        )

    def withdraw(self, reference: str, at: float) -> int:
        cursor = self._db.execute(
            "UPDATE effects SET withdrawn_at = ? WHERE ledger = ? AND reference = ? AND withdrawn_at IS NULL",
            (at, self.name, reference),
        )
        return cursor.rowcount

    def shift_clock(self, seconds: float) -> float:
        self._db.execute("UPDATE ledgers SET clock_offset = ? WHERE name = ?", (self.offset + seconds, self.name))
        self.offset += seconds
        return self.offset


class Store:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._db = connect(path)
        self._lock = threading.Lock()
        self._ledgers: dict[str, _SqliteLedger] = {}
        for name, contract, offset in self._db.execute("SELECT name, contract, clock_offset FROM ledgers"):
            self._ledgers[name] = _SqliteLedger(self._db, name, Contract.from_dict(json.loads(contract)), offset)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def put_ledger(self, name: str, contract: Contract) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO ledgers (name, contract) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET contract = excluded.contract",
                (name, json.dumps(contract.to_dict())),
            )
            if name in self._ledgers:
                self._ledgers[name].contract = contract
            else:
                self._ledgers[name] = _SqliteLedger(self._db, name, contract, 0.0)

    def contract(self, ledger: str) -> Contract:
        return self._ledger(ledger).contract

    def _ledger(self, name: str) -> _SqliteLedger:
        try:
            return self._ledgers[name]
        except KeyError:
            raise UnknownLedger(name) from None

    def _run(self, name: str, operation: Callable[[_SqliteLedger], T]) -> T:
        """One operation of the state machine: under the lock, in one transaction."""
        with self._lock:
            state = self._ledger(name)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                done = operation(state)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")
            return done

    def admit(self, ticket: SendTicket) -> Answer | None:
        """None: admitted and claimed as in flight; otherwise the answer to give now."""
        return self._run(ticket.ledger, lambda s: machine.admit(s, ticket))

    def apply(self, ticket: SendTicket, payload: dict[str, Any]) -> Answer:
        return self._run(ticket.ledger, lambda s: machine.apply(s, ticket, payload))

    def send(self, ticket: SendTicket, payload: dict[str, Any]) -> Answer:
        """An unarmed send whole: admit, then apply if admitted, under one lock and
        in one transaction (nothing can come between them: no request is held there)."""

        def admit_and_apply(state: _SqliteLedger) -> Answer:
            early = machine.admit(state, ticket)
            return early if early is not None else machine.apply(state, ticket, payload)

        return self._run(ticket.ledger, admit_and_apply)

    def drop(self, ticket: SendTicket) -> None:
        self._run(ticket.ledger, lambda s: machine.drop(s, ticket))

    def lookup(self, ledger: str, reference: str) -> tuple[int, EffectRow | None]:
        return self._run(ledger, lambda s: machine.lookup(s, reference))

    def listing(self, ledger: str, reference: str) -> list[EffectRow]:
        return self._run(ledger, lambda s: machine.listing(s, reference))

    def withdraw(self, ledger: str, reference: str) -> int:
        return self._run(ledger, lambda s: machine.withdraw(s, reference))

    def advance_clock(self, ledger: str, seconds: float) -> float:
        return self._run(ledger, lambda s: machine.advance_clock(s, seconds))

    def log(self, ledger: str, after: int, limit: int) -> list[LoggedEffect]:
        """The ledger's effects in log order: an observer's view, outside the contract."""
        with self._lock:
            self._ledger(ledger)
            rows = self._db.execute(
                "SELECT id, reference, idem_key, fingerprint, applied_at, withdrawn_at FROM effects "
                "WHERE ledger = ? AND id > ? ORDER BY id LIMIT ?",
                (ledger, after, limit),
            )
            return [LoggedEffect(*row) for row in rows]

    def put_scope_secret(self, ledger: str, secret: str) -> None:
        """The secret that signs the ledger's scoped base URLs; kept with the log,
        so a restarted provider still honours the URLs handed out before."""
        with self._lock:
            self._ledger(ledger)
            self._db.execute("INSERT OR REPLACE INTO scope_secrets VALUES (?, ?)", (ledger, secret))

    def scope_secret(self, ledger: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT secret FROM scope_secrets WHERE ledger = ?", (ledger,)).fetchone()
            return None if row is None else row[0]

    def put_destination(self, ledger: str, destination: Destination) -> None:
        """Where the ledger's jobs' requests are forwarded to; kept with the log, as the secrets are."""
        with self._lock:
            self._ledger(ledger)
            self._db.execute(
                "INSERT OR REPLACE INTO destinations VALUES (?, ?, ?)",
                (ledger, destination.url, json.dumps(destination.effects.spelled())),
            )

    def destination(self, ledger: str) -> Destination | None:
        with self._lock:
            row = self._db.execute("SELECT url, effects FROM destinations WHERE ledger = ?", (ledger,)).fetchone()
        return None if row is None else Destination(row[0], Effects.parse(json.loads(row[1])))

    def record_forward(self, forwarded: Forwarded) -> None:
        with self._lock:
            self._db.execute(
                "INSERT INTO forwards (ledger, reference, attempt, method, path, effect, status, at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    forwarded.ledger,
                    forwarded.reference,
                    forwarded.attempt,
                    forwarded.method,
                    forwarded.path,
                    forwarded.effect,
                    forwarded.status,
                    time.time(),
                ),
            )


@dataclass(frozen=True, slots=True)
class Forwarded:
    """A request forwarded to a destination, as its log keeps it."""

    ledger: str
    reference: str
    attempt: int
    method: str
    path: str
    effect: bool
    status: int  # the destination's answer; 0: none (it did not answer, or the lab dropped the request)


@dataclass(frozen=True, slots=True)
class LoggedEffect:
    id: int
    reference: str
    key: str | None
    fingerprint: str
    applied_at: float
    withdrawn_at: float | None


@dataclass(frozen=True, slots=True)
class ReferenceRecord:
    """What the log holds for one reference: the checker's raw material."""

    effects: int = 0
    withdrawn: int = 0
    declined: int = 0
    sends: int = 0
    lookups: int = 0


class LogReader:
    """Read-only access to a provider's log, for the checker (another process)."""

    def __init__(self, path: Path | str) -> None:
        self._db = connect(path, readonly=True)

    def close(self) -> None:
        self._db.close()

    def effect_count(self, ledger: str) -> int:
        """Effects in a ledger so far (withdrawn ones included)."""
        return int(self._db.execute("SELECT COUNT(*) FROM effects WHERE ledger = ?", (ledger,)).fetchone()[0])

    def records(self, ledger: str, references: Iterable[str]) -> dict[str, ReferenceRecord]:
        refs = list(references)
        if not refs:
            return {}
        marks = ",".join("?" * len(refs))
        out: dict[str, dict[str, int]] = {}
        queries = (
            (
                ("effects", "withdrawn"),
                f"SELECT reference, COUNT(*), COUNT(withdrawn_at) FROM effects "
                f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            ),
            (
                ("sends", "declined"),
                f"SELECT reference, COUNT(*), SUM(outcome = '{SendOutcome.DECLINED.value}') FROM requests "
                f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            ),
            (
                ("lookups",),
                f"SELECT reference, SUM(count) FROM reads "
                f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            ),
            # A destination's: its effect requests are sends, the others reads (its records are its own).
            (
                ("sends", "lookups"),
                f"SELECT reference, SUM(effect), SUM(NOT effect) FROM forwards "
                f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            ),
        )
        for names, sql in queries:
            for ref, *values in self._db.execute(sql, (ledger, *refs)):
                fields = out.setdefault(ref, {})
                for name, value in zip(names, values, strict=True):
                    fields[name] = fields.get(name, 0) + (value or 0)
        return {ref: ReferenceRecord(**fields) for ref, fields in out.items()}
