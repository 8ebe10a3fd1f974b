"""The provider's HTTP layer in process: a claimed key is released on every path, even when holding fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from starlette.testclient import TestClient

from labcore.boundaries import Boundary
from labcore.events import Hit
from provider.app import create_app
from provider.gate import Gate
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
