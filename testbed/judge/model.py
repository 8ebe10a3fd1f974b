"""The expectations model: what each cell must show, predicted without I/O.

Every op is simulated on its own: the strategy's real flow (`workers.flow`)
runs against an abstract provider built from the provider's pure contract,
faults strike where the plan arms them and act as `labcore.faults` says, and
the nemesis changes the world between attempts as the scenario says. The
per-op facts then go through the same checker as a real run's facts, so a
difference between prediction and observation is a difference in behaviour,
never in bookkeeping.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from labcore.answers import Lookup, Reply, Seen, seen
from labcore.boundaries import Boundary
from labcore.delivery import redelivery
from labcore.faults import RULES, Fault, Release, cause_of
from labcore.ids import reminted_id
from labcore.payloads import fingerprint
from labcore.plan import Armed, Plan
from labcore.receipts import receipt
from labcore.redelivery import Cause, Redelivery
from provider import ledger
from provider.contract import Contract, EffectRow, StoredKey
from provider.ledger import Claims, Read, SendOutcome, SendTicket
from testbed.experiment.matrix import Cell
from testbed.experiment.scenarios import SCENARIOS, Nemesis, ReadPath, Scenario
from testbed.experiment.workload import make_op, replanned
from testbed.judge.checker import OpFacts, Tally
from workers.flow import AskProvider, At, ReadMarker, Result, Send, WriteMarker, attempt, drive
from workers.strategies import STRATEGIES, KeyMode, Marker, Strategy

# Enough pauses for any answer the abstract provider can give twice.
_WAITS = 3


@dataclass(frozen=True, slots=True)
class Prediction:
    tally: Tally
    kills: int
    faults: int
    # Fields whose value depends on timing (how often a worker polls a request
    # still in flight); they are reported, not compared.
    inexact: frozenset[str] = frozenset()


# An op's facts that are counts of a row, by the count's name.
COUNTED = {"sends": "requests", "lookups": "lookups"}


def inexact_facts(faults: Iterable[Fault]) -> frozenset[str]:
    """An op's facts that depend on timing, reported but not compared: a request held
    in flight is polled for by the other attempt; and where a held job and its duplicate
    end at once, the op's outcome is whichever of their conclusions lands last."""
    held = set(faults) & {Fault.LATE, Fault.HOLD}
    return frozenset({"sends", "lookups"} if held else ()) | frozenset({"outcome"} if Fault.HOLD in held else ())


def inexact_fields(faults: Iterable[Fault]) -> frozenset[str]:
    """The row's counts made of inexact facts."""
    return frozenset(COUNTED[f] for f in inexact_facts(faults) if f in COUNTED)


def predict_ops(cell: Cell, plan: Plan, ops: int, retries: int) -> Iterator[tuple[int, list[OpFacts], int, int]]:
    """Each op in order: (sequence number, facts of every op made for it, kills, faults)."""
    scenario = SCENARIOS[cell.scenario]
    strategy = STRATEGIES[cell.strategy]
    policy = redelivery(cell.delivery, retries)
    for seq in range(1, ops + 1):
        yield seq, *simulate_op(seq, plan.armed(seq), strategy, scenario, policy)


def predict(cell: Cell, plan: Plan, ops: int, retries: int) -> Prediction:
    tally = Tally()
    kills = faults = 0
    for _, facts, op_kills, op_faults in predict_ops(cell, plan, ops, retries):
        tally.add(facts)
        kills += op_kills
        faults += op_faults
    return Prediction(tally, kills, faults, inexact_fields(cell.faults))


class _Hit(Exception):
    def __init__(self, armed: Armed) -> None:
        self.armed = armed


@dataclass(slots=True)
class _Provider:
    """The provider's state for one reference, kept in memory and changed only
    by the provider's own state machine (`provider.ledger`), as the store's is."""

    contract: Contract
    clock: float = 0.0
    applied: list[EffectRow] = field(default_factory=list)
    keys: dict[str, StoredKey] = field(default_factory=dict)
    claims: Claims = field(default_factory=Claims)
    declined: int = 0
    sends: int = 0
    lookups: int = 0

    # -- provider.ledger.LedgerState ---------------------------------------

    def now(self) -> float:
        return self.clock

    def stored_key(self, key: str) -> StoredKey | None:
        return self.keys.get(key)

    def key_in_flight(self, key: str) -> bool:
        return self.claims.key_in_flight(key)

    def reference_in_flight(self, reference: str) -> bool:
        return self.claims.reference_in_flight(reference)

    def effects(self, reference: str) -> list[EffectRow]:
        return self.applied

    def claim(self, key: str | None, reference: str) -> None:
        self.claims.claim(key, reference)

    def unclaim(self, key: str | None, reference: str) -> None:
        self.claims.unclaim(key, reference)

    def append_effect(self, ticket: SendTicket, body: dict[str, Any], at: float) -> int:
        self.applied.append(EffectRow(len(self.applied) + 1, ticket.fingerprint, at, False))
        return len(self.applied)

    def store_key(self, key: str, stored: StoredKey) -> None:
        self.keys[key] = stored

    def record_send(self, ticket: SendTicket, outcome: SendOutcome, status: int, at: float) -> None:
        self.sends += 1
        self.declined += outcome is SendOutcome.DECLINED

    def count_read(self, reference: str, read: Read) -> None:
        self.lookups += 1

    def withdraw(self, reference: str, at: float) -> int:
        live = sum(not e.withdrawn for e in self.applied)
        self.applied = [replace(e, withdrawn=True) for e in self.applied]
        return live

    def shift_clock(self, seconds: float) -> float:
        self.clock += seconds
        return self.clock

    # -- what a worker sees ------------------------------------------------

    def read(self, path: ReadPath, reference: str, fp: str) -> Lookup:
        if path is ReadPath.LISTING:
            rows = ledger.listing(self, reference)
            return Lookup(Seen.FOUND, receipt(rows[-1].id), rows[-1].fingerprint == fp) if rows else Lookup(Seen.EMPTY)
        if not self.contract.single_lookup:
            return Lookup(Seen.UNKNOWN)
        status, effect = ledger.lookup(self, reference)
        if effect is None or status != 200:
            return Lookup(seen(status))
        return Lookup(Seen.FOUND, receipt(effect.id), effect.fingerprint == fp)


def _reply(answer: ledger.Answer) -> Reply:
    return Reply(answer.status, str(answer.body.get("id", "")), answer.replayed)


@dataclass(slots=True)
class _Held:
    """A request the provider holds in flight, applied when the controller releases it."""

    ticket: SendTicket
    body: dict[str, Any]
    attempt: int  # the attempt that sent it
    reply: Reply | None = None


@dataclass(slots=True)
class _Op:
    """One op across its attempts: the local marker, the current payload, a held request."""

    id: str
    strategy: Strategy
    scenario: Scenario
    provider: _Provider
    payload: dict[str, Any]
    marker: Marker | None = None
    held: _Held | None = None
    attempts: int = 0
    holds: int = 0

    def attempt(self, fault: Armed | None, duplicate: Any = None) -> Result:
        """Run the op's next attempt; raises _Hit where the fault strikes. While a
        request of this attempt is held, `duplicate` runs the op's duplicate job."""
        self.attempts += 1
        number = self.attempts
        body = {"reference": self.id, **self.payload}
        fp = fingerprint(body)
        key = {KeyMode.NONE: None, KeyMode.STABLE: self.id, KeyMode.FRESH: f"{self.id}#{number}"}[self.strategy.key]
        ticket = SendTicket(self.id, self.id, key, fp, number)
        provider = self.provider
        contacted = False

        def answered(value: Any) -> Any:
            # The controller lets a held request land once the next attempt got its first answer.
            nonlocal contacted
            if not contacted:
                self.release()
            contacted = True
            return value

        def do(step: object) -> Any:
            if isinstance(step, At):
                if fault is not None and fault.boundary is step.boundary and not step.boundary.on_provider:
                    raise _Hit(fault)
            elif isinstance(step, ReadMarker):
                return self.marker
            elif isinstance(step, WriteMarker):
                self.marker = step.marker
            elif isinstance(step, Send):
                early = ledger.admit(provider, ticket)
                if early is not None:
                    return answered(_reply(early))
                if fault is not None and fault.boundary is Boundary.BEFORE_EFFECT:
                    rule = RULES[fault.fault]
                    release = rule.release[Boundary.BEFORE_EFFECT]
                    if release in (Release.DROP, Release.LOST):
                        (ledger.drop if release is Release.DROP else ledger.forget)(provider, ticket)
                        raise _Hit(fault)
                    self.held = _Held(ticket, body, number)
                    if rule.client_gives_up:
                        raise _Hit(fault)
                    # The client keeps waiting while the duplicate runs; its first answer releases this request.
                    self.holds += 1
                    held = self.held
                    assert duplicate is not None, "a hold needs a duplicate to release it"
                    duplicate()
                    assert held.reply is not None
                    return held.reply
                reply = _reply(ledger.apply(provider, ticket, body))
                if fault is not None and fault.boundary is Boundary.AFTER_EFFECT:
                    raise _Hit(fault)
                return answered(reply)
            elif isinstance(step, AskProvider):
                return answered(provider.read(self.scenario.read_path, self.id, fp))
            return None

        return drive(attempt(self.strategy, _WAITS), do)

    def release(self, ended: int | None = None) -> None:
        """Apply the held request. With `ended`: that attempt has ended, which releases
        a request an earlier attempt left held (the controller lets a late request land
        once a later attempt got an answer or ended), not its own."""
        if self.held is not None and (ended is None or self.held.attempt < ended):
            held, self.held = self.held, None
            held.reply = _reply(ledger.apply(self.provider, held.ticket, held.body))

    def nemesis(self) -> None:
        """What the scenario changes after a fault, before the next attempt."""
        nemesis = self.scenario.nemesis
        if nemesis is Nemesis.CHANGE_PAYLOAD:
            self.payload = replanned(self.payload)
        elif nemesis is Nemesis.EXPIRE_KEYS:
            ledger.advance_clock(self.provider, self.provider.contract.retention_seconds + 1)
        elif nemesis is Nemesis.WITHDRAW:
            ledger.withdraw(self.provider, self.id)

    def facts(self, intent: str, result: Result | None) -> OpFacts:
        provider = self.provider
        return OpFacts(
            op=self.id,
            intent=intent,
            attempts=self.attempts,
            effects=len(provider.applied),
            withdrawn=sum(e.withdrawn for e in provider.applied),
            declined=provider.declined,
            sends=provider.sends,
            lookups=provider.lookups,
            outcome=None if result is None else result.outcome,
            detail="" if result is None else result.detail,
            job_failed=result is None,
        )


def simulate_op(
    seq: int, armed: tuple[Armed, ...], strategy: Strategy, scenario: Scenario, policy: Redelivery
) -> tuple[list[OpFacts], int, int]:
    """One logical action through all its attempts, as long as the queue runs it again
    (`policy`): (facts of every op made for it, kills, faults)."""
    made = make_op(seq, 0, declined=scenario.declines_faulted_ops and bool(armed))
    op = _Op(made.id, strategy, scenario, _Provider(scenario.contract), made.payload)
    by_attempt = {a.attempt: a for a in armed}
    kills = faults = 0
    result: Result | None = None
    reminted: _Op | None = None

    def duplicate() -> None:
        # The same op identity enqueued again: a job of its own, same marker, same provider record.
        # Its first answer releases the held request; so does its end, if it never asks.
        op.attempt(None)
        op.release()

    causes: list[Cause] = []
    number = 0
    while policy.again(causes):
        number += 1
        try:
            result = op.attempt(by_attempt.get(number), duplicate if scenario.nemesis is Nemesis.DUPLICATE else None)
        except _Hit as hit:
            faults += 1
            rule = RULES[hit.armed.fault]
            kills += rule.kills
            causes.append(cause_of(hit.armed.fault))
            if not rule.kills_horse:
                # The work-horse lives on: its call failed, and its attempt's end is reported.
                op.release(ended=number)
            if scenario.nemesis is Nemesis.REMINT and reminted is None:
                # A new identity: its own marker, its own record (and key) at the provider.
                reminted = _Op(reminted_id(made.id), strategy, scenario, _Provider(scenario.contract), op.payload)
            op.nemesis()
            continue
        break
    faults += op.holds
    op.release()  # the job is over: the controller releases what it still holds
    # The held job resumes after its duplicate has answered, so its conclusion is the last one.
    facts = [op.facts(made.intent, result)]
    if reminted is not None:
        facts.append(reminted.facts(made.intent, reminted.attempt(None)))
    return facts, kills, faults
