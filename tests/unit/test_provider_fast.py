"""The requests the provider's protocol answers itself (provider.fast) get what the app's routes give them.

Each request goes to `answering` on one store and through the app on another,
both started alike: the same status, body and replay flag, or None where the
app is to answer (anything not checked whole here, valid or not).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from labcore.boundaries import Boundary
from labcore.events import Hit
from provider.app import create_app
from provider.fast import Held, answering
from provider.gate import Gate, GateMiddleware
from provider.holds import Holds
from provider.ledger import Answer
from provider.store import Store

TOKEN = "t0ken"
BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hello"}
JSON = [(b"content-type", b"application/json"), (b"authorization", b"Bearer " + TOKEN.encode())]


class _Both:
    """A request answered here and by the app, each on a store of its own."""

    def __init__(self, tmp_path: Path) -> None:
        self._stores = [Store(tmp_path / "fast.sqlite3"), Store(tmp_path / "app.sqlite3")]
        self.gate = Gate()
        self.fast = answering(self._stores[0], Holds(None, self.gate), self.gate, TOKEN)
        app = GateMiddleware(create_app(self._stores[1], Holds(None, Gate()), TOKEN), Gate())
        self._http = TestClient(app)

    def close(self) -> None:
        self._http.close()
        for store in self._stores:
            store.close()

    def ask(self, method: str, url: str, headers: list[tuple[bytes, bytes]], body: bytes) -> Answer | Held | None:
        """The answer made here; the app is asked the same, and must agree where one is made."""
        answer = self.fast(method.encode(), url.encode(), headers, body)
        got = self._http.request(method, url, headers=[(k.decode(), v.decode()) for k, v in headers], content=body)
        if isinstance(answer, Answer):
            assert (answer.status, answer.body) == (got.status_code, got.json()), (method, url)
            assert answer.replayed == (got.headers.get("idempotent-replayed") == "true")
        return answer


@pytest.fixture
def both(tmp_path: Path):
    served = _Both(tmp_path)
    assert isinstance(served.ask("PUT", "/ledgers/l", JSON, b"{}"), Answer)
    yield served
    served.close()


def _send(key: str | None = None, **extra: str) -> list[tuple[bytes, bytes]]:
    headers = [*JSON, *(((b"idempotency-key", key.encode()),) if key else ())]
    return headers + [(name.replace("_", "-").encode(), value.encode()) for name, value in extra.items()]


def test_health_and_contracts_are_answered_as_the_app_answers_them(both: _Both) -> None:
    assert both.ask("GET", "/health", [], b"") == Answer(200, {"status": "ok"})
    contract = {"dedup": False, "retention_seconds": 60.0, "decline_domain": "no.example"}
    put = both.ask("PUT", "/ledgers/other", JSON, json.dumps(contract).encode())
    assert isinstance(put, Answer) and put.body["contract"]["retention_seconds"] == 60.0


def test_sends_are_answered_as_the_app_answers_them(both: _Both) -> None:
    body = json.dumps(BODY).encode()
    assert isinstance(both.ask("POST", "/ledgers/l/effects", _send("k1", x_testbed_attempt="1"), body), Answer)
    replayed = both.ask("POST", "/ledgers/l/effects", _send("k1", x_testbed_attempt="2"), body)
    assert isinstance(replayed, Answer) and replayed.replayed
    other = json.dumps({**BODY, "message": "changed"}).encode()
    assert both.ask("POST", "/ledgers/l/effects", _send("k1"), other) == Answer(
        422, {"error": "idempotency key reused with a different payload"}
    )
    assert both.ask("POST", "/ledgers/gone/effects", _send(), body) == Answer(404, {"error": "unknown ledger"})


@pytest.mark.parametrize(
    ("method", "url", "headers", "body"),
    [
        ("GET", "/health?x=1", [], b""),  # a query: the route's
        ("GET", "/ledgers/l/effects/op-1", JSON, b""),  # a read: the app's
        ("PUT", "/ledgers/l", [JSON[0]], b"{}"),  # no token
        ("PUT", "/ledgers/l", [(b"content-type", b"text/plain"), JSON[1]], b"{}"),
        ("PUT", "/ledgers/l", JSON, b'{"dedup": "yes"}'),  # strict: not a boolean
        ("PUT", "/ledgers/l%20x", JSON, b"{}"),  # an escape the server would unquote
        ("POST", "/ledgers/l/effects", JSON, b"{"),  # not JSON
        ("POST", "/ledgers/l/effects", JSON, json.dumps({**BODY, "extra": 1}).encode()),
        ("POST", "/ledgers/l/effects", [*JSON, JSON[0]], json.dumps(BODY).encode()),  # a repeated header
        ("POST", "/ledgers/l/effects", _send("bad key"), json.dumps(BODY).encode()),
        ("POST", "/ledgers/l/effects", _send(x_testbed_attempt="0"), json.dumps(BODY).encode()),
        ("POST", "/ledgers/l/effects", _send(x_testbed_chaos="{}"), json.dumps(BODY).encode()),  # not a hit
    ],
)
def test_anything_not_checked_whole_here_is_the_apps(both: _Both, method, url, headers, body) -> None:
    assert both.ask(method, url, headers, body) is None


def test_an_armed_send_is_held_in_the_gate_until_its_answer_is_written(both: _Both) -> None:
    hit = Hit("h1", "c", "op-1", 1, Boundary.BEFORE_EFFECT, "kill", 1, "w1").header()
    held = both.fast(b"POST", b"/ledgers/l/effects", _send("k2", x_testbed_chaos=hit), json.dumps(BODY).encode())
    assert isinstance(held, Held)
    # Claimed: the same key meanwhile is in flight; a hold without a bus lets it through.
    assert both.fast(b"POST", b"/ledgers/l/effects", _send("k2"), json.dumps(BODY).encode()).status == 409
    assert held.run().status == 201
    assert both.gate._active == 1  # counted as in progress until written
    held.done()
    assert both.gate._active == 0


def test_a_closed_gate_leaves_a_send_to_the_app_and_lets_contracts_through(both: _Both) -> None:
    both.gate.close_and_drain(timeout=0.1)
    assert both.fast(b"POST", b"/ledgers/l/effects", _send(), json.dumps(BODY).encode()) is None
    assert both.fast(b"PUT", b"/ledgers/l", JSON, b"{}") == Answer(200, {"ledger": "l", "contract": _DEFAULT})
    assert both.fast(b"GET", b"/health", [], b"") is not None


_DEFAULT = {
    "dedup": True,
    "retention_seconds": 86_400.0,
    "single_lookup": True,
    "listing_lag_seconds": 0.0,
    "decline_domain": "",
}
