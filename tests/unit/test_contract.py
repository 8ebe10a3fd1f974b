"""The provider's contract decisions, and its store's atomicity under concurrent requests."""

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from labcore.payloads import fingerprint
from provider.contract import (
    DAY,
    Contract,
    Decision,
    EffectRow,
    StoredKey,
    decide,
    declines,
    listed,
    lookup_status,
)
from provider.ledger import SendTicket
from provider.store import LogReader, Store

ON = Contract()
FP = fingerprint({"reference": "op-1", "recipient": "a@example.test", "message": "hi"})
STORED = StoredKey(FP, 201, {"id": "eff_1"}, created_at=0.0)


@pytest.mark.parametrize(
    ("contract", "key", "stored", "in_flight", "fp", "now", "decision"),
    [
        (ON, None, None, False, FP, 0, Decision.APPLY),  # no key: no contract
        (ON, "k", None, False, FP, 0, Decision.APPLY),
        (ON, "k", STORED, False, FP, 10, Decision.REPLAY),
        (ON, "k", STORED, False, "other", 10, Decision.CONFLICT),
        (ON, "k", None, True, FP, 0, Decision.IN_FLIGHT),
        (ON, "k", STORED, False, FP, DAY + 1, Decision.APPLY),  # past retention: forgotten
        (Contract(dedup=False), "k", STORED, True, FP, 0, Decision.APPLY),
    ],
)
def test_decide(
    contract: Contract,
    key: str | None,
    stored: StoredKey | None,
    in_flight: bool,
    fp: str,
    now: float,
    decision: Decision,
) -> None:
    assert decide(contract, key, stored, in_flight, fp, now) is decision


def test_fingerprint_ignores_key_order() -> None:
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": 2})


def test_lookup_separates_absent_withdrawn_and_in_flight() -> None:
    live, gone = EffectRow(1, FP, 0, False), EffectRow(2, FP, 0, True)
    assert lookup_status([], in_flight=False) == (404, None)
    assert lookup_status([], in_flight=True) == (409, None)
    assert lookup_status([gone], in_flight=False) == (410, gone)
    assert lookup_status([gone, live], in_flight=False) == (200, live)


def test_listing_lags_and_omits_withdrawn() -> None:
    lagging = Contract(listing_lag_seconds=60)
    assert not listed(EffectRow(1, FP, applied_at=100, withdrawn=False), lagging, now=120)
    assert listed(EffectRow(1, FP, applied_at=100, withdrawn=False), lagging, now=161)
    assert not listed(EffectRow(1, FP, applied_at=0, withdrawn=True), ON, now=10)


def test_declines_by_recipient_domain() -> None:
    contract = Contract(decline_domain="declined.example")
    assert declines(contract, {"recipient": "u@declined.example"})
    assert not declines(contract, {"recipient": "u@example.test"})
    assert not declines(ON, {"recipient": "u@declined.example"})


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(tmp_path / "log.sqlite3")
    s.put_ledger("l", ON)
    yield s
    s.close()


def ticket(key: str | None = "k", ref: str = "op-1", fp: str = FP) -> SendTicket:
    return SendTicket("l", ref, key, fp, 1)


def test_store_replays_and_rejects_changed_payloads(store: Store, tmp_path: Path) -> None:
    payload = {"reference": "op-1", "recipient": "a@example.test", "message": "hi"}
    assert store.admit(ticket()) is None
    first = store.apply(ticket(), payload)
    replay = store.admit(ticket())
    assert replay is not None and replay.replayed and replay.body == first.body
    conflict = store.admit(ticket(fp="changed"))
    assert conflict is not None and conflict.status == 422
    reader = LogReader(tmp_path / "log.sqlite3")
    record = reader.records("l", ["op-1"])["op-1"]
    assert (record.effects, record.sends) == (1, 3)


def test_store_same_key_in_flight_gets_409_and_drop_frees_it(store: Store) -> None:
    assert store.admit(ticket()) is None
    answer = store.admit(ticket())
    assert answer is not None and answer.status == 409
    store.drop(ticket())
    assert store.admit(ticket()) is None


def test_concurrent_sends_with_one_key_apply_once(store: Store, tmp_path: Path) -> None:
    """Lookup and append are one step: 16 threads racing on one key make one effect."""
    payload = {"reference": "op-1", "recipient": "a@example.test", "message": "hi"}
    barrier = threading.Barrier(16)
    statuses = []

    def racer() -> None:
        barrier.wait()
        early = store.admit(ticket())
        statuses.append(early.status if early else store.apply(ticket(), payload).status)

    threads = [threading.Thread(target=racer) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert LogReader(tmp_path / "log.sqlite3").records("l", ["op-1"])["op-1"].effects == 1
    assert statuses.count(201) >= 1 and set(statuses) <= {201, 409}


def test_clock_advance_expires_keys(store: Store) -> None:
    payload = {"reference": "op-1", "recipient": "a@example.test", "message": "hi"}
    store.admit(ticket())
    store.apply(ticket(), payload)
    store.advance_clock("l", DAY + 1)
    assert store.admit(ticket()) is None  # applied again: the key is past retention


def test_withdrawn_effect_answers_410(store: Store) -> None:
    store.admit(ticket(key=None))
    store.apply(ticket(key=None), {"reference": "op-1", "recipient": "a@example.test", "message": "hi"})
    assert store.withdraw("l", "op-1") == 1
    assert store.lookup("l", "op-1")[0] == 410
    assert store.listing("l", "op-1") == []
    assert store.lookup("l", "never")[0] == 404
