"""The provider's durable effect log (SQLite in WAL mode) and its in-flight table.

Every decision about a send is taken and recorded under one lock: reading the
stored key, claiming it as in flight, and later appending the effect and the
key's response. Two concurrent requests with the same key therefore can never
both append. In-flight claims live in memory on purpose: a request in flight
dies with the process that holds it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from provider.contract import (
    DECLINED_STATUS,
    Contract,
    Decision,
    EffectRow,
    StoredKey,
    decide,
    declines,
    listed,
    lookup_status,
)

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
);
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY,
    ledger TEXT NOT NULL,
    kind TEXT NOT NULL,
    reference TEXT NOT NULL,
    idem_key TEXT,
    attempt INTEGER,
    outcome TEXT NOT NULL,
    status INTEGER NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_by_reference ON requests (ledger, reference);
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


@dataclass(frozen=True, slots=True)
class SendTicket:
    """A send the store has admitted and claimed; it must be finished or dropped."""

    ledger: str
    reference: str
    key: str | None
    fingerprint: str
    attempt: int | None


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: dict[str, Any]
    replayed: bool = False


class Store:
    def __init__(self, path: Path | str) -> None:
        self._db = connect(path)
        self._lock = threading.Lock()
        self._ledgers: dict[str, tuple[Contract, float]] = {}
        self._keys_in_flight: set[tuple[str, str]] = set()
        self._refs_in_flight: Counter[tuple[str, str]] = Counter()
        for name, contract, offset in self._db.execute("SELECT name, contract, clock_offset FROM ledgers"):
            self._ledgers[name] = (Contract.from_dict(json.loads(contract)), offset)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- ledgers -----------------------------------------------------------

    def put_ledger(self, name: str, contract: Contract) -> None:
        with self._lock:
            offset = self._ledgers.get(name, (contract, 0.0))[1]
            self._db.execute(
                "INSERT INTO ledgers (name, contract, clock_offset) VALUES (?, ?, ?) "
                "ON CONFLICT(name) DO UPDATE SET contract = excluded.contract",
                (name, json.dumps(contract.to_dict()), offset),
            )
            self._ledgers[name] = (contract, offset)

    def contract(self, ledger: str) -> Contract:
        return self._ledger(ledger)[0]

    def advance_clock(self, ledger: str, seconds: float) -> float:
        with self._lock:
            contract, offset = self._ledger(ledger)
            offset += seconds
            self._db.execute("UPDATE ledgers SET clock_offset = ? WHERE name = ?", (offset, ledger))
            self._ledgers[ledger] = (contract, offset)
            return offset

    def _ledger(self, ledger: str) -> tuple[Contract, float]:
        try:
            return self._ledgers[ledger]
        except KeyError:
            raise UnknownLedger(ledger) from None

    def _now(self, ledger: str) -> float:
        return time.time() + self._ledger(ledger)[1]

    # -- sends -------------------------------------------------------------

    def admit(self, ticket: SendTicket) -> Answer | None:
        """Decide a send. None: admitted and claimed as in flight; otherwise the answer to give now."""
        with self._lock:
            contract = self.contract(ticket.ledger)
            now = self._now(ticket.ledger)
            stored = self._stored_key(ticket) if contract.dedup and ticket.key else None
            in_flight = (ticket.ledger, ticket.key) in self._keys_in_flight
            decision = decide(contract, ticket.key, stored, in_flight, ticket.fingerprint, now)
            if decision is Decision.APPLY:
                if ticket.key and contract.dedup:
                    self._keys_in_flight.add((ticket.ledger, ticket.key))
                self._refs_in_flight[(ticket.ledger, ticket.reference)] += 1
                return None
            if decision is Decision.REPLAY:
                assert stored is not None
                answer = Answer(stored.status, stored.response, replayed=True)
            elif decision is Decision.CONFLICT:
                answer = Answer(422, {"error": "idempotency key reused with a different payload"})
            else:
                answer = Answer(409, {"error": "a request with this idempotency key is in flight"})
            self._log(ticket, "send", decision.value, answer.status, now)
            return answer

    def apply(self, ticket: SendTicket, payload: dict[str, Any]) -> Answer:
        """Append the effect (or the permanent error) and store the key's response, atomically."""
        with self._lock:
            contract = self.contract(ticket.ledger)
            now = self._now(ticket.ledger)
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if declines(contract, payload):
                    answer = Answer(DECLINED_STATUS, {"error": "recipient declined", "reference": ticket.reference})
                    outcome = "declined"
                else:
                    cursor = self._db.execute(
                        "INSERT INTO effects (ledger, reference, idem_key, fingerprint, body, applied_at) "
                        "VALUES (?, ?, ?, ?, ?, ?)",
                        (ticket.ledger, ticket.reference, ticket.key, ticket.fingerprint, json.dumps(payload), now),
                    )
                    answer = Answer(201, {"id": f"eff_{cursor.lastrowid}", "reference": ticket.reference})
                    outcome = "applied"
                if ticket.key and contract.dedup:
                    self._db.execute(
                        "INSERT OR REPLACE INTO idempotency_keys VALUES (?, ?, ?, ?, ?, ?)",
                        (ticket.ledger, ticket.key, ticket.fingerprint, answer.status, json.dumps(answer.body), now),
                    )
                self._log(ticket, "send", outcome, answer.status, now)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            finally:
                self._release(ticket)
            return answer

    def drop(self, ticket: SendTicket) -> None:
        """Forget an admitted send without applying it (its client is gone)."""
        with self._lock:
            self._log(ticket, "send", "dropped", 0, self._now(ticket.ledger))
            self._release(ticket)

    def _release(self, ticket: SendTicket) -> None:
        self._keys_in_flight.discard((ticket.ledger, ticket.key or ""))
        ref = (ticket.ledger, ticket.reference)
        self._refs_in_flight[ref] -= 1
        if self._refs_in_flight[ref] <= 0:
            del self._refs_in_flight[ref]

    def _stored_key(self, ticket: SendTicket) -> StoredKey | None:
        row = self._db.execute(
            "SELECT fingerprint, status, response, created_at FROM idempotency_keys WHERE ledger = ? AND key = ?",
            (ticket.ledger, ticket.key),
        ).fetchone()
        if row is None:
            return None
        return StoredKey(row[0], row[1], json.loads(row[2]), row[3])

    def _log(self, ticket: SendTicket, kind: str, outcome: str, status: int, now: float) -> None:
        self._db.execute(
            "INSERT INTO requests (ledger, kind, reference, idem_key, attempt, outcome, status, at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (ticket.ledger, kind, ticket.reference, ticket.key, ticket.attempt, outcome, status, now),
        )

    # -- reads -------------------------------------------------------------

    def lookup(self, ledger: str, reference: str, attempt: int | None) -> tuple[int, EffectRow | None]:
        with self._lock:
            effects = self._effects(ledger, reference)
            in_flight = (ledger, reference) in self._refs_in_flight
            status, effect = lookup_status(effects, in_flight)
            self._log(
                SendTicket(ledger, reference, None, "", attempt), "lookup", str(status), status, self._now(ledger)
            )
            return status, effect

    def listing(self, ledger: str, reference: str, attempt: int | None) -> list[EffectRow]:
        with self._lock:
            contract, now = self.contract(ledger), self._now(ledger)
            rows = [e for e in self._effects(ledger, reference) if listed(e, contract, now)]
            self._log(SendTicket(ledger, reference, None, "", attempt), "list", str(len(rows)), 200, now)
            return rows

    def withdraw(self, ledger: str, reference: str) -> int:
        with self._lock:
            cursor = self._db.execute(
                "UPDATE effects SET withdrawn_at = ? WHERE ledger = ? AND reference = ? AND withdrawn_at IS NULL",
                (self._now(ledger), ledger, reference),
            )
            return cursor.rowcount

    def _effects(self, ledger: str, reference: str) -> list[EffectRow]:
        self._ledger(ledger)
        rows = self._db.execute(
            "SELECT id, fingerprint, applied_at, withdrawn_at FROM effects WHERE ledger = ? AND reference = ? "
            "ORDER BY id",
            (ledger, reference),
        )
        return [EffectRow(r[0], r[1], r[2], r[3] is not None) for r in rows]

    # -- scoped access (provider/api.py) -------------------------------------

    def put_scope_secret(self, ledger: str, secret: str) -> None:
        """The secret that signs the ledger's scoped base URLs; kept with the log,
        so a restarted provider still honours the URLs handed out before."""
        with self._lock:
            self._ledger(ledger)
            self._db.execute("CREATE TABLE IF NOT EXISTS scope_secrets (ledger TEXT PRIMARY KEY, secret TEXT NOT NULL)")
            self._db.execute("INSERT OR REPLACE INTO scope_secrets VALUES (?, ?)", (ledger, secret))

    def scope_secret(self, ledger: str) -> str | None:
        with self._lock:
            try:
                row = self._db.execute("SELECT secret FROM scope_secrets WHERE ledger = ?", (ledger,)).fetchone()
            except sqlite3.OperationalError:  # no ledger has a secret yet
                return None
            return None if row is None else row[0]


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

    def records(self, ledger: str, references: Iterable[str]) -> dict[str, ReferenceRecord]:
        refs = list(references)
        if not refs:
            return {}
        marks = ",".join("?" * len(refs))
        out: dict[str, dict[str, int]] = {}
        for ref, n, withdrawn in self._db.execute(
            f"SELECT reference, COUNT(*), COUNT(withdrawn_at) FROM effects "
            f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            (ledger, *refs),
        ):
            out.setdefault(ref, {}).update(effects=n, withdrawn=withdrawn)
        for ref, sends, declined, lookups in self._db.execute(
            f"SELECT reference, SUM(kind = 'send'), SUM(outcome = 'declined'), SUM(kind != 'send') FROM requests "
            f"WHERE ledger = ? AND reference IN ({marks}) GROUP BY reference",
            (ledger, *refs),
        ):
            out.setdefault(ref, {}).update(sends=sends, declined=declined, lookups=lookups)
        return {ref: ReferenceRecord(**fields) for ref, fields in out.items()}
