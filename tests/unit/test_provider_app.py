"""The provider's HTTP layer in process: a claimed key is released on every path, even when holding fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from labcore.boundaries import Boundary
from labcore.events import Hit
from provider.app import create_app
from provider.gate import Gate, GateMiddleware
from provider.holds import Holds
from provider.store import Store

BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hello"}
AUTH = {"Authorization": "Bearer t0ken"}


class BrokenBus(Holds):
    """The chaos bus is gone mid-hold (Redis died): the hold raises."""

    def __init__(self) -> None:
        super().__init__(None, Gate())

    def at(self, boundary: Boundary, hit: Hit | None) -> None:
        raise ConnectionError("bus unreachable")


@pytest.fixture
def client(tmp_path: Path):
    store = Store(tmp_path / "log.sqlite3")
    with TestClient(create_app(store, BrokenBus(), "t0ken"), raise_server_exceptions=False) as http:
        assert http.put("/ledgers/l", json={}, headers=AUTH).status_code == 200
        yield http
    store.close()


def test_a_failed_hold_releases_the_key(client: TestClient) -> None:
    hit = Hit("h1", "c", "op-1", 1, Boundary.BEFORE_EFFECT.value, "kill", 1, "w1").header()
    failed = client.post(
        "/ledgers/l/effects", json=BODY, headers={**AUTH, "Idempotency-Key": "k", "X-Testbed-Chaos": hit}
    )
    assert failed.status_code == 500
    # Not stuck in flight: the lookup says absent, and the retry applies.
    assert client.get("/ledgers/l/effects/op-1", headers=AUTH).status_code == 404
    assert client.post("/ledgers/l/effects", json=BODY, headers={**AUTH, "Idempotency-Key": "k"}).status_code == 201


def test_the_token_is_checked_before_anything_else(client: TestClient) -> None:
    assert client.post("/ledgers/l/effects", content=b"{", headers={"Authorization": "Bearer t0kem"}).status_code == 401
    assert client.get("/health").status_code == 200
    doc = client.get("/openapi.json", headers=AUTH).json()
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            assert "422" not in operation["responses"] or path.endswith("/effects")
            assert ("401" in operation["responses"]) == (path != "/health")


def test_a_closed_gate_turns_jobs_away_and_lets_health_and_the_controller_through(tmp_path: Path) -> None:
    """A restarted provider may already drain for the next crash: the controller,
    waiting for /health and setting up the world, must still reach it."""
    store = Store(tmp_path / "gated.sqlite3")
    gate = Gate()
    with TestClient(GateMiddleware(create_app(store, Holds(None, gate), "t0ken"), gate)) as http:
        gate.close_and_drain(timeout=0.1)
        assert http.get("/health").status_code == 200
        assert http.put("/ledgers/g", json={}, headers=AUTH).status_code == 200
        assert http.post("/ledgers/g/clock", json={"advance_seconds": 1}, headers=AUTH).status_code == 200
        turned_away = [
            http.post("/ledgers/g/effects", json=BODY, headers=AUTH),
            http.get("/ledgers/g/effects/op-1", headers=AUTH),
            http.get("/ledgers/g/effects", params={"reference": "op-1"}, headers=AUTH),
            http.post("/s/anything/effects", json=BODY),
        ]
        assert {(r.status_code, r.headers.get("retry-after")) for r in turned_away} == {(503, "1")}
        gate.reopen()
        assert http.post("/ledgers/g/effects", json=BODY, headers=AUTH).status_code == 201
    store.close()
