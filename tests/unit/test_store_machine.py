"""The provider's SQLite store against the model's in-memory ledger, on random operation sequences.

Both run the one state machine (`provider.ledger`) over their own state: the store
over its tables, the model (`testbed.judge.model`) over a `_Provider` per op. Any
sequence of contracts, sends with and without keys (the same key with the same or
another payload), in-flight claims applied or dropped, lookups, listings,
withdrawals, clock steps and provider restarts (the claims die with the process,
as the model's `forget` says) must get the same answers from both and leave the
same records in the store's log as in the model.

Receipts name effects by their row in the store's log and by their place in the op's
list in the model: each store receipt is matched to the model's the first time both
appear, and must stay matched. The store's clock is the wall clock plus its offset,
the model's starts at 0: the drawn contracts end retention and listing lag in half
seconds and the clock moves in whole ones, so neither machine sits exactly on a
boundary the other has just passed.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from labcore.payloads import fingerprint
from labcore.receipts import receipt
from provider import ledger
from provider.contract import Contract, EffectRow
from provider.ledger import Answer, SendTicket
from provider.store import LogReader, ReferenceRecord, Store
from testbed.judge.model import _Provider

LEDGER = "l"
REFERENCES = ("op-1", "op-2")
KEYS = (None, "k1", "k2")
RECIPIENTS = ("a@example.test", "b@declines.example")
MESSAGES = ("hello", "changed")


@st.composite
def sends(draw: st.DrawFn) -> tuple[SendTicket, dict[str, Any]]:
    """A send of one of the ops: with no key or one of the op's keys, one of a few payloads."""
    reference, key = draw(st.sampled_from(REFERENCES)), draw(st.sampled_from(KEYS))
    payload = {
        "reference": reference,
        "recipient": draw(st.sampled_from(RECIPIENTS)),
        "message": draw(st.sampled_from(MESSAGES)),
    }
    ticket = SendTicket(LEDGER, reference, key and f"{reference}:{key}", fingerprint(payload), draw(st.integers(1, 3)))
    return ticket, payload


contracts = st.builds(
    Contract,
    dedup=st.booleans(),
    retention_seconds=st.sampled_from([30.5, 100.5]),
    single_lookup=st.booleans(),
    listing_lag_seconds=st.sampled_from([0.0, 20.5]),
    decline_domain=st.sampled_from(["", "declines.example"]),
)


class StoreAgainstModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="store-machine-"))
        self.store = Store(self.dir / "log.sqlite3")
        self.store.put_ledger(LEDGER, Contract())
        # The model keeps one provider per op: keys are per op here too (each op's own names).
        self.model = {reference: _Provider(Contract()) for reference in REFERENCES}
        self.pending: list[tuple[SendTicket, dict[str, Any]]] = []  # admitted, not yet applied or dropped
        self.receipts: dict[str, str] = {}  # the store's receipt -> the model's

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- how the two are compared --------------------------------------------

    def same_receipt(self, stored: str, modelled: str) -> None:
        assert self.receipts.setdefault(stored, modelled) == modelled, (stored, modelled)

    def same_answer(self, stored: Answer | None, modelled: Answer | None) -> None:
        if stored is None or modelled is None:
            assert stored is modelled, (stored, modelled)
            return
        assert (stored.status, stored.replayed) == (modelled.status, modelled.replayed)
        assert stored.body.keys() == modelled.body.keys()
        for name, value in stored.body.items():
            if name == "id":
                self.same_receipt(value, modelled.body[name])
            else:
                assert value == modelled.body[name], (name, stored.body, modelled.body)

    def same_rows(self, stored: list[EffectRow], modelled: list[EffectRow]) -> None:
        assert len(stored) == len(modelled)
        for row, model_row in zip(stored, modelled, strict=True):
            assert (row.fingerprint, row.withdrawn) == (model_row.fingerprint, model_row.withdrawn)
            self.same_receipt(receipt(row.id), receipt(model_row.id))

    # -- operations ------------------------------------------------------------

    @rule(contract=contracts)
    def put_contract(self, contract: Contract) -> None:
        self.store.put_ledger(LEDGER, contract)
        for provider in self.model.values():
            provider.contract = contract

    @rule(sent=sends(), whole=st.booleans())
    def send(self, sent: tuple[SendTicket, dict[str, Any]], whole: bool) -> None:
        """Admitted, and left in flight; or `whole`: the store's admit and apply in one step."""
        ticket, payload = sent
        provider = self.model[ticket.reference]
        modelled = ledger.admit(provider, ticket)
        if whole:
            if modelled is None:
                modelled = ledger.apply(provider, ticket, payload)
            self.same_answer(self.store.send(ticket, payload), modelled)
            return
        self.same_answer(self.store.admit(ticket), modelled)
        if modelled is None:
            self.pending.append(sent)

    @precondition(lambda self: self.pending)
    @rule(data=st.data(), applied=st.booleans())
    def settle(self, data: st.DataObject, applied: bool) -> None:
        """One send in flight applied, or dropped (its client went away)."""
        ticket, payload = self.pending.pop(data.draw(st.integers(0, len(self.pending) - 1)))
        provider = self.model[ticket.reference]
        if applied:
            self.same_answer(self.store.apply(ticket, payload), ledger.apply(provider, ticket, payload))
        else:
            self.store.drop(ticket)
            ledger.drop(provider, ticket)

    @rule(reference=st.sampled_from(REFERENCES))
    def lookup(self, reference: str) -> None:
        status, row = self.store.lookup(LEDGER, reference)
        model_status, model_row = ledger.lookup(self.model[reference], reference)
        assert status == model_status
        self.same_rows([] if row is None else [row], [] if model_row is None else [model_row])

    @rule(reference=st.sampled_from(REFERENCES))
    def listing(self, reference: str) -> None:
        self.same_rows(self.store.listing(LEDGER, reference), ledger.listing(self.model[reference], reference))

    @rule(reference=st.sampled_from(REFERENCES))
    def withdraw(self, reference: str) -> None:
        assert self.store.withdraw(LEDGER, reference) == ledger.withdraw(self.model[reference], reference)

    @rule(seconds=st.sampled_from([1.0, 7.0, 31.0]))
    def advance_clock(self, seconds: float) -> None:
        offset = self.store.advance_clock(LEDGER, seconds)
        assert {ledger.advance_clock(provider, seconds) for provider in self.model.values()} == {offset}

    @rule()
    def restart(self) -> None:
        """The provider dies and comes back on its log: the sends it held in flight die with it."""
        for ticket, _ in self.pending:
            ledger.forget(self.model[ticket.reference], ticket)
        self.pending.clear()
        self.store.close()
        self.store = Store(self.dir / "log.sqlite3")

    # -- the log ---------------------------------------------------------------

    @invariant()
    def the_log_holds_what_the_model_holds(self) -> None:
        reader = LogReader(self.dir / "log.sqlite3")
        try:
            records = reader.records(LEDGER, REFERENCES)
        finally:
            reader.close()
        for reference, provider in self.model.items():
            record = records.get(reference, ReferenceRecord())
            assert (record.effects, record.withdrawn, record.declined, record.sends, record.lookups) == (
                len(provider.applied),
                sum(e.withdrawn for e in provider.applied),
                provider.declined,
                provider.sends,
                provider.lookups,
            ), reference


StoreAgainstModel.TestCase.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
test_store_and_model_agree = StoreAgainstModel.TestCase
