"""The provider's one state machine, run by the SQLite store and by the model's
in-memory state: the same requests get the same answers and leave the same records."""

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from labcore.payloads import fingerprint
from provider import ledger
from provider.contract import DAY, Contract
from provider.ledger import SendTicket
from provider.store import LogReader, Store
from testbed.judge.model import _Provider

BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hi"}
FP = fingerprint(BODY)


Run = Callable[..., object]  # one of the state machine's operations, by name, with its arguments


def script(run: Run) -> list[object]:
    """A story through every operation: send, replay, conflict, in flight, drop,
    expiry, decline, withdraw, lookups and listings. Returns what each step answered."""
    seen: list[object] = []
    t = SendTicket("l", "op-1", "k", FP, 1)
    seen.append(run("admit", t))
    seen.append(run("admit", t))  # 409: in flight
    seen.append(run("lookup"))  # 409: in flight
    seen.append(run("apply", t, BODY))
    seen.append(run("admit", t))  # replay
    seen.append(run("admit", SendTicket("l", "op-1", "k", "other", 2)))  # 422
    seen.append(run("lookup"))
    seen.append(run("clock", DAY + 1))
    seen.append(run("admit", t))  # expired: applied again
    seen.append(run("drop", t))
    seen.append(run("withdraw"))
    seen.append(run("lookup"))  # 410
    seen.append(run("listing"))
    return seen


def store_runner(tmp_path: Path, contract: Contract) -> tuple[Store, Run]:
    store = Store(tmp_path / "log.sqlite3")
    store.put_ledger("l", contract)

    def run(op: str, *args: Any) -> object:
        if op == "admit":
            answer = store.admit(args[0])
            return None if answer is None else (answer.status, answer.replayed)
        if op == "apply":
            return store.apply(*args).status
        if op == "drop":
            store.drop(args[0])
            return None
        if op == "lookup":
            return store.lookup("l", "op-1")[0]
        if op == "listing":
            return len(store.listing("l", "op-1"))
        if op == "withdraw":
            return store.withdraw("l", "op-1")
        return store.advance_clock("l", args[0]) > 0

    return store, run


def model_runner(contract: Contract) -> tuple[_Provider, Run]:
    state = _Provider(contract)

    def run(op: str, *args: Any) -> object:
        if op == "admit":
            answer = ledger.admit(state, args[0])
            return None if answer is None else (answer.status, answer.replayed)
        if op == "apply":
            return ledger.apply(state, *args).status
        if op == "drop":
            ledger.drop(state, args[0])
            return None
        if op == "lookup":
            return ledger.lookup(state, "op-1")[0]
        if op == "listing":
            return len(ledger.listing(state, "op-1"))
        if op == "withdraw":
            return ledger.withdraw(state, "op-1")
        return ledger.advance_clock(state, args[0]) > 0

    return state, run


@pytest.mark.parametrize("contract", [Contract(), Contract(dedup=False)])
def test_store_and_model_answer_alike_and_record_alike(tmp_path: Path, contract: Contract) -> None:
    store, on_disk = store_runner(tmp_path, contract)
    state, in_memory = model_runner(contract)
    assert script(on_disk) == script(in_memory)
    store.close()
    record = LogReader(tmp_path / "log.sqlite3").records("l", ["op-1"])["op-1"]
    assert (record.effects, record.withdrawn, record.sends, record.lookups) == (
        len(state.applied),
        sum(e.withdrawn for e in state.applied),
        state.sends,
        state.lookups,
    )
