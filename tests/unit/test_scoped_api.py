"""The provider's generic effect API for users' jobs, on a real store (SQLite in a temp dir)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from labcore.answers import REPLAYED
from labcore.boundaries import Boundary
from labcore.events import Hit
from labcore.faults import Fault, Release
from labcore.scoped import Scope, sign
from provider.contract import Contract
from provider.gate import Gate
from provider.holds import Holds
from provider.service import HeldSend, Response
from provider.store import LogReader, ReferenceRecord, Store
from tests.support.service_client import ServiceClient

SECRET = "k" * 32
LEDGER = "run.c001"

# The provider fixture: its client, its hold points and its store's file.
Provided = tuple["Client", "RecordingHolds", Path]


class RecordingHolds(Holds):
    """The provider's hold points, without a controller: records where a request was held."""

    def __init__(self) -> None:
        super().__init__(None, Gate())
        self.held: list[tuple[Boundary, str]] = []

    def at(self, boundary: Boundary, hit: Hit | None) -> Release | None:
        if hit is not None and hit.boundary == boundary:
            self.held.append((boundary, hit.hit))
        return None


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[Provided]:
    store = Store(tmp_path / "p.sqlite3")
    holds = RecordingHolds()
    client = Client(ServiceClient(store, holds=holds))
    client.put(f"/ledgers/{LEDGER}", json=Contract().to_dict())
    assert client.put(f"/ledgers/{LEDGER}/scope", json={"secret": SECRET}).status_code == 200
    yield client, holds, tmp_path / "p.sqlite3"
    store.close()


class Client:
    """The service asked as an HTTP client would ask it; an armed effect's hold is run at once."""

    def __init__(self, service: ServiceClient) -> None:
        self._service = service

    def request(self, method: str, url: str, **kwargs: Any) -> Answered:
        answer = self._service.ask(method, url, **kwargs)
        if isinstance(answer, HeldSend):
            held, made = answer, answer.run()
            held.done()
            assert isinstance(made, Response)  # the provider's own answer: nothing here is forwarded
            answer = made
        return Answered(answer.status, answer.body, {REPLAYED: "true"} if answer.replayed else {})

    def get(self, url: str, **kwargs: Any) -> Answered:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> Answered:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> Answered:
        return self.request("PUT", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> Answered:
        return self.request("DELETE", url, **kwargs)


@dataclass(frozen=True)
class Answered:
    status_code: int
    body: dict[str, Any]
    headers: dict[str, str]

    def json(self) -> dict[str, Any]:
        return self.body


def base(op: str, attempt: int = 1, hit: str | None = None) -> str:
    return f"/s/{sign(Scope(LEDGER, op, attempt, hit), SECRET)}"


def records(db: Path, *ops: str) -> dict[str, ReferenceRecord]:
    reader = LogReader(db)
    try:
        return reader.records(LEDGER, ops)
    finally:
        reader.close()


def test_any_write_under_api_is_an_effect_of_the_scoped_op(provider: Provided) -> None:
    client, _, db = provider
    first = client.post(f"{base('op-1')}/api/v1/charges", json={"amount": 5})
    assert first.status_code == 201 and first.json()["reference"] == "op-1"
    for method in ("PUT", "PATCH", "DELETE"):
        assert client.request(method, f"{base('op-2', 2)}/api/things/9", json={"m": method}).status_code == 201
    assert client.delete(f"{base('op-3')}/api/things/9").status_code == 201  # no body: still an effect
    seen = records(db, "op-1", "op-2", "op-3")
    assert (seen["op-1"].effects, seen["op-2"].effects, seen["op-3"].effects) == (1, 3, 1)


def test_idempotency_key_per_the_contract(provider: Provided) -> None:
    client, _, db = provider
    url = f"{base('op-1')}/api/charges"
    first = client.post(url, json={"amount": 5}, headers={"Idempotency-Key": "k1"})
    again = client.post(f"{base('op-1', 2)}/api/charges", json={"amount": 5}, headers={"Idempotency-Key": "k1"})
    assert again.status_code == 201 and again.json() == first.json()
    assert again.headers["Idempotent-Replayed"] == "true"
    # The key's fingerprint covers method, path and body.
    assert client.post(url, json={"amount": 6}, headers={"Idempotency-Key": "k1"}).status_code == 422
    assert client.put(url, json={"amount": 5}, headers={"Idempotency-Key": "k1"}).status_code == 422
    assert client.post(f"{url}/x", json={"amount": 5}, headers={"Idempotency-Key": "k1"}).status_code == 422
    assert records(db, "op-1")["op-1"].effects == 1


def test_lookup_and_listing_of_the_scoped_op(provider: Provided) -> None:
    client, _, _ = provider
    assert client.get(f"{base('op-1')}/effects").status_code == 404
    created = client.post(f"{base('op-1')}/api/charges", json={}).json()
    found = client.get(f"{base('op-1', 2)}/effects")
    assert found.status_code == 200 and found.json()["id"] == created["id"]
    assert client.get(f"{base('op-1')}/listing").json()["data"][0]["id"] == created["id"]
    assert client.get(f"{base('op-2')}/effects").status_code == 404


def test_reads_under_api_are_not_effects(provider: Provided) -> None:
    client, _, db = provider
    assert client.get(f"{base('op-1')}/api/charges").status_code == 405
    assert client.post(f"{base('op-1')}/api/charges", body=b"not json").status_code == 415
    assert records(db, "op-1") == {}


def test_a_token_not_signed_for_the_ledger_is_refused(provider: Provided) -> None:
    client, _, db = provider
    forged = sign(Scope(LEDGER, "op-1", 1), "z" * 32)
    assert client.post(f"/s/{forged}/api/charges", json={}).status_code == 403
    assert client.get(f"/s/{forged}/effects").status_code == 403
    unknown = sign(Scope("run.c999-MARKER", "op-1", 1), SECRET)
    refused = client.post(f"/s/{unknown}/api/charges", json={})
    assert refused.status_code == 403 and "MARKER" not in str(refused.body)  # the ledger named in it is not repeated
    assert client.post("/s/garbage/api/charges", json={}).status_code == 403
    assert records(db, "op-1") == {}


def test_the_armed_hit_holds_the_attempts_first_effect_call_only(provider: Provided) -> None:
    client, holds, db = provider
    hit = Hit("c001:7:1:after-effect", "c001", "op-7", 1, Boundary.AFTER_EFFECT, Fault.KILL, 1, "w1")
    url = f"{base('op-7', 1, hit.header())}/api/charges"
    assert client.get(f"{base('op-7', 1, hit.header())}/effects").status_code == 404  # a read is not held
    assert client.post(url, json={}).status_code == 201
    assert client.post(url, json={}).status_code == 201
    assert holds.held == [(Boundary.AFTER_EFFECT, hit.hit)]
    assert records(db, "op-7")["op-7"].effects == 2
