"""A ledger's state machine: every decision and state change the provider
makes, with no I/O of its own.

Each operation reads what it needs through a `LedgerState` and changes it
through the same port. The SQLite store implements the port over its tables
(and runs each operation under its lock, inside one transaction where it
writes); the expectations model implements it in memory. What the provider
does is therefore written once, here, and the model that judges the real
provider cannot drift from it.

A send goes through `admit` (decide: apply, replay, conflict, in flight; an
admitted send is claimed as in flight), then `apply` or `drop`. Reads count
towards the op's lookups; withdrawals and the clock serve the scenarios.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from labcore.receipts import receipt
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


@dataclass(frozen=True, slots=True)
class SendTicket:
    """A send as the provider sees it; once admitted it must be applied or dropped."""

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


class SendOutcome(StrEnum):
    """What became of a send, as the request log records it."""

    APPLIED = "applied"
    DECLINED = "declined"
    DROPPED = "dropped"
    REPLAY = Decision.REPLAY.value
    CONFLICT = Decision.CONFLICT.value
    IN_FLIGHT = Decision.IN_FLIGHT.value


class Read(StrEnum):
    LOOKUP = "lookup"
    LISTING = "list"


class LedgerState(Protocol):
    """One ledger's state, as the machine reads and changes it."""

    contract: Contract

    def now(self) -> float: ...
    def stored_key(self, key: str) -> StoredKey | None: ...
    def key_in_flight(self, key: str) -> bool: ...
    def reference_in_flight(self, reference: str) -> bool: ...
    def effects(self, reference: str) -> list[EffectRow]: ...
    def claim(self, key: str | None, reference: str) -> None: ...
    # Gives up the reference's claim, and the key's if it holds one.
    def unclaim(self, key: str | None, reference: str) -> None: ...
    def append_effect(self, ticket: SendTicket, body: dict[str, Any], at: float) -> int: ...
    def store_key(self, key: str, stored: StoredKey) -> None: ...
    def record_send(self, ticket: SendTicket, outcome: SendOutcome, status: int, at: float) -> None: ...
    def count_read(self, reference: str, read: Read) -> None: ...
    def withdraw(self, reference: str, at: float) -> int: ...
    def shift_clock(self, seconds: float) -> float: ...


@dataclass(slots=True)
class Claims:
    """Sends admitted and not yet applied or dropped: by key (for 409s) and by
    reference (a lookup answers 409 meanwhile). Kept in memory on purpose: a
    request in flight dies with the process that holds it."""

    keys: set[str] = field(default_factory=set)
    references: Counter[str] = field(default_factory=Counter)

    def claim(self, key: str | None, reference: str) -> None:
        if key:
            self.keys.add(key)
        self.references[reference] += 1

    def unclaim(self, key: str | None, reference: str) -> None:
        self.keys.discard(key or "")
        self.references[reference] -= 1
        if self.references[reference] <= 0:
            del self.references[reference]

    def key_in_flight(self, key: str) -> bool:
        return key in self.keys

    def reference_in_flight(self, reference: str) -> bool:
        return reference in self.references


def _dedups(state: LedgerState, key: str | None) -> bool:
    return bool(key) and state.contract.dedup


_EARLY = {
    Decision.CONFLICT: Answer(422, {"error": "idempotency key reused with a different payload"}),
    Decision.IN_FLIGHT: Answer(409, {"error": "a request with this idempotency key is in flight"}),
}


def admit(state: LedgerState, ticket: SendTicket) -> Answer | None:
    """Decide a send. None: admitted and claimed as in flight; otherwise the answer to give now."""
    now = state.now()
    stored = state.stored_key(ticket.key) if ticket.key and _dedups(state, ticket.key) else None
    in_flight = bool(ticket.key) and state.key_in_flight(ticket.key or "")
    decision = decide(state.contract, ticket.key, stored, in_flight, ticket.fingerprint, now)
    if decision is Decision.APPLY:
        state.claim(ticket.key if _dedups(state, ticket.key) else None, ticket.reference)
        return None
    if decision is Decision.REPLAY:
        assert stored is not None
        answer = Answer(stored.status, stored.response, replayed=True)
    else:
        answer = _EARLY[decision]
    state.record_send(ticket, SendOutcome(decision.value), answer.status, now)
    return answer


def apply(state: LedgerState, ticket: SendTicket, payload: dict[str, Any]) -> Answer:
    """Append the effect (or the permanent error) and store the key's response.
    The claim is given up whatever happens, so a failure never leaves a key in flight."""
    try:
        now = state.now()
        if declines(state.contract, payload):
            answer = Answer(DECLINED_STATUS, {"error": "recipient declined", "reference": ticket.reference})
            outcome = SendOutcome.DECLINED
        else:
            effect = state.append_effect(ticket, payload, now)
            answer = Answer(201, {"id": receipt(effect), "reference": ticket.reference})
            outcome = SendOutcome.APPLIED
        if ticket.key and _dedups(state, ticket.key):
            state.store_key(ticket.key, StoredKey(ticket.fingerprint, answer.status, answer.body, now))
        state.record_send(ticket, outcome, answer.status, now)
        return answer
    finally:
        state.unclaim(ticket.key, ticket.reference)


def drop(state: LedgerState, ticket: SendTicket) -> None:
    """Forget an admitted send without applying it (its client is gone)."""
    try:
        state.record_send(ticket, SendOutcome.DROPPED, 0, state.now())
    finally:
        state.unclaim(ticket.key, ticket.reference)


def forget(state: LedgerState, ticket: SendTicket) -> None:
    """The process holding an admitted send died: its claim dies with it, and
    nothing was logged (the SQLite store gets this for free: claims live in memory)."""
    state.unclaim(ticket.key, ticket.reference)


def lookup(state: LedgerState, reference: str) -> tuple[int, EffectRow | None]:
    """The strongly consistent single-item read (200 / 404 / 409 / 410)."""
    state.count_read(reference, Read.LOOKUP)
    return lookup_status(state.effects(reference), state.reference_in_flight(reference))


def listing(state: LedgerState, reference: str) -> list[EffectRow]:
    """The listing filtered by reference: lags, and leaves withdrawn effects out."""
    state.count_read(reference, Read.LISTING)
    now = state.now()
    return [e for e in state.effects(reference) if listed(e, state.contract, now)]


def withdraw(state: LedgerState, reference: str) -> int:
    return state.withdraw(reference, state.now())


def advance_clock(state: LedgerState, seconds: float) -> float:
    return state.shift_clock(seconds)
