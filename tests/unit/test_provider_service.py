"""The provider's one request path in process: every request read and refused as its route says,
a claimed key released on every path, even when holding fails, and the gate kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from labcore.boundaries import Boundary
from labcore.events import Hit
from labcore.faults import Fault
from labcore.scoped import Scope, sign
from provider.gate import Gate
from provider.holds import Holds
from provider.openapi import document
from provider.routes import ROUTES
from provider.service import HeldSend, Request, Response
from provider.store import Store
from provider.wire import MAX_BODY, MAX_FORWARDED_BODY, Fields
from tests.support.service_client import ServiceClient, request

BODY = {"reference": "op-1", "recipient": "a@example.test", "message": "hello"}
TOKEN = "t0ken"
WRONG = {"Authorization": "Bearer t0kem"}


class BrokenBus(Holds):
    """The chaos bus is gone mid-hold (Redis died): the hold raises."""

    def __init__(self) -> None:
        super().__init__(None, Gate())

    def at(self, boundary: Boundary, hit: Hit | None) -> None:
        raise ConnectionError("bus unreachable")


def _hit(boundary: Boundary = Boundary.BEFORE_EFFECT) -> str:
    return Hit("h1", "c", "op-1", 1, boundary, Fault.KILL, 1, "w1").header()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    store = Store(tmp_path / "log.sqlite3")
    yield store
    store.close()


@pytest.fixture
def client(store: Store) -> ServiceClient:
    client = ServiceClient(store, TOKEN)
    assert client.answer("PUT", "/ledgers/l", json={}).status == 200
    return client


def test_contracts_and_sends_are_answered_by_the_ledger(client: ServiceClient) -> None:
    contract = {"dedup": False, "retention_seconds": 60, "decline_domain": "no.example"}
    put = client.answer("PUT", "/ledgers/other", json=contract)
    assert put.body == {
        "ledger": "other",
        "contract": {**contract, "retention_seconds": 60.0, "single_lookup": True, "listing_lag_seconds": 0.0},
    }
    first = client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": "k1", "X-Testbed-Attempt": "1"}, json=BODY)
    assert (first.status, first.body, first.replayed) == (201, {"id": "eff_1", "reference": "op-1"}, False)
    again = client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": "k1", "X-Testbed-Attempt": "2"}, json=BODY)
    assert (again.status, again.body, again.replayed) == (201, first.body, True)
    other = client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": "k1"}, json={**BODY, "message": "x"})
    assert (other.status, other.body) == (422, {"error": "idempotency key reused with a different payload"})
    gone = client.answer("POST", "/ledgers/gone/effects", json=BODY)
    assert (gone.status, gone.body) == (404, {"error": "unknown ledger"})


def test_a_failed_hold_releases_the_key(store: Store) -> None:
    client = ServiceClient(store, TOKEN, BrokenBus())
    client.answer("PUT", "/ledgers/l", json={})
    held = client.ask("POST", "/ledgers/l/effects", {"Idempotency-Key": "k", "X-Testbed-Chaos": _hit()}, json=BODY)
    assert isinstance(held, HeldSend)
    with pytest.raises(ConnectionError):
        held.run()  # the server answers 500
    held.done()
    # Not stuck in flight: the lookup says absent, and the retry applies.
    assert client.answer("GET", "/ledgers/l/effects/op-1").status == 404
    assert client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": "k"}, json=BODY).status == 201


def test_an_armed_send_is_held_in_the_gate_until_its_answer_is_written(client: ServiceClient) -> None:
    held = client.ask("POST", "/ledgers/l/effects", {"Idempotency-Key": "k2", "X-Testbed-Chaos": _hit()}, json=BODY)
    assert isinstance(held, HeldSend)
    # Claimed: the same key meanwhile is in flight; a hold without a bus lets it through.
    assert client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": "k2"}, json=BODY).status == 409
    assert held.run().status == 201
    assert client.gate._active == 1  # counted as in progress until written
    held.done()
    assert client.gate._active == 0


def test_the_token_is_checked_before_anything_else(client: ServiceClient) -> None:
    refused = client.answer("POST", "/ledgers/l/effects", WRONG, body=b"{")
    assert (refused.status, refused.body) == (401, {"error": "missing or wrong bearer token"})
    assert refused.headers == ((b"www-authenticate", b"Bearer"),) and refused.close
    assert client.answer("GET", "/nowhere", WRONG).status == 401  # before the route is known
    assert client.answer("GET", "/health", WRONG).body == {"status": "ok", "failures": 0, "failure": None}
    assert client.answer("GET", "/s/nowhere", WRONG).status == 404  # a user's job's path needs no bearer token
    doc = client.answer("GET", "/openapi.json").body
    assert doc["components"]["securitySchemes"] == {"bearer": {"type": "http", "scheme": "bearer"}}
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            assert ("422" in operation["responses"]) == (operation["operationId"] in {"send", *_SCOPED_SENDS})
            assert ("401" in operation["responses"]) == (path != "/health" and not path.startswith(("/s/", "/d/")))


_SCOPED_SENDS = {f"scoped_{m}" for m in ("post", "put", "patch", "delete")}


def test_a_body_is_read_only_where_the_token_is_not_missing(client: ServiceClient) -> None:
    """The server asks before it reads a body: a request refused for want of the token is answered from its head."""
    assert not client.service.reads_body(Request("POST", "/ledgers/l/effects"))
    assert not client.service.reads_body(
        Request("PUT", "/%6Cedgers/l", headers=Fields([(b"authorization", b"Bearer no")]))
    )
    authorized = Fields([(b"authorization", f"Bearer {TOKEN}".encode())])
    assert client.service.reads_body(Request("POST", "/ledgers/l/effects", headers=authorized))
    assert client.service.reads_body(Request("POST", "/s/token/api/charges"))  # its URL is its credential
    assert client.service.reads_body(Request("POST", "/%73/token/api/charges"))


def test_a_closed_gate_turns_jobs_away_and_lets_health_and_the_controller_through(client: ServiceClient) -> None:
    """A restarted provider may already drain for the next crash: the controller,
    waiting for /health and setting up the world, must still reach it."""
    client.gate.close_and_drain(timeout=0.1)
    assert client.answer("GET", "/health").status == 200
    assert client.answer("PUT", "/ledgers/g", json={}).status == 200
    assert client.answer("POST", "/ledgers/g/clock", json={"advance_seconds": 1}).status == 200
    turned_away = [
        client.answer("POST", "/ledgers/g/effects", json=BODY),
        client.answer("GET", "/ledgers/g/effects/op-1"),
        client.answer("GET", "/ledgers/g/effects?reference=op-1"),
        client.answer("POST", "/s/anything/effects", json=BODY),
        client.answer("POST", "/ledgers/g/effects", WRONG, json=BODY),  # before the token: nothing is read
    ]
    assert {(r.status, r.headers) for r in turned_away} == {(503, ((b"retry-after", b"1"),))}
    assert client.gate._active == 0
    client.gate.reopen()
    assert client.answer("POST", "/ledgers/g/effects", json=BODY).status == 201


@pytest.mark.parametrize(
    ("method", "url", "headers", "body", "status", "error"),
    [
        ("GET", "/health?x=1", {}, b"", 200, None),  # a query no route reads
        ("PUT", "/ledgers/l", {"Content-Type": "text/plain"}, b"{}", 400, "malformed request (body)"),
        ("PUT", "/ledgers/l", {"Content-Type": "application/json; charset=utf-8"}, b"{}", 200, None),
        ("PUT", "/ledgers/l", {"Content-Type": "application/problem+json"}, b"{}", 200, None),
        ("PUT", "/ledgers/l", {}, b"{}", 400, "malformed request (body)"),  # no content type
        ("PUT", "/ledgers/l", {"Content-Type": "application/json"}, b"", 400, "malformed request (body)"),
        ("PUT", "/ledgers/l", {"Content-Type": "application/json"}, b'{"dedup": "yes"}', 400, None),  # strict
        ("PUT", "/ledgers/l", {"Content-Type": "application/json"}, b'{"retention_seconds": NaN}', 400, None),
        ("PUT", "/ledgers/l%20x", {"Content-Type": "application/json"}, b"{}", 200, None),  # the name is "l x"
        ("PUT", "/ledgers/" + "n" * 201, {"Content-Type": "application/json"}, b"{}", 400, "malformed request (path)"),
        ("PUT", "/ledgers/l/", {"Content-Type": "application/json"}, b"{}", 404, "not found"),
        ("POST", "/ledgers/l/effects", {"Content-Type": "application/json"}, b"{", 400, None),
        ("POST", "/ledgers/l/effects", {"Content-Type": "application/json"}, b"\xff{}", 400, None),
        ("POST", "/ledgers/l/effects", {"Idempotency-Key": "bad key"}, json.dumps(BODY).encode(), 400, None),
        ("POST", "/ledgers/l/effects", {"X-Testbed-Attempt": "0"}, json.dumps(BODY).encode(), 400, None),
        ("POST", "/ledgers/l/effects", {"X-Testbed-Attempt": "+2"}, json.dumps(BODY).encode(), 400, None),
        ("POST", "/ledgers/l/effects", {"X-Testbed-Chaos": "{}"}, json.dumps(BODY).encode(), 400, None),
        ("GET", "/ledgers/l/effects", {}, b"", 400, "malformed request (query)"),  # no reference
        ("GET", "/ledgers/l/log?limit=0", {}, b"", 400, "malformed request (query)"),
        ("DELETE", "/ledgers/l/effects", {}, b"", 405, "method not allowed"),
        ("HEAD", "/health", {}, b"", 405, "method not allowed"),
        ("GET", "/ledgers", {}, b"", 404, "not found"),
        (
            "GET",
            "/s/t/api/x",
            {},
            b"",
            405,
            "only POST, PUT, PATCH and DELETE under /api/ are effects; GET {base}/effects",
        ),
    ],
)
def test_each_request_is_read_as_its_route_says(
    client: ServiceClient, method: str, url: str, headers: dict[str, str], body: bytes, status: int, error: str | None
) -> None:
    if body and "Content-Type" not in headers and method == "POST":
        headers = {**headers, "Content-Type": "application/json"}
    answer = client.answer(method, url, headers, body=body)
    assert answer.status == status, answer.body
    if error is not None:
        assert answer.body == {"error": error}


def test_a_405_names_every_method_of_the_path(client: ServiceClient) -> None:
    assert client.answer("DELETE", "/ledgers/l/effects").headers == ((b"allow", b"GET, POST"),)
    assert client.answer("GET", "/s/t/api/x").headers == ((b"allow", b"DELETE, PATCH, POST, PUT"),)


def test_refusals_come_in_order_and_a_400_names_every_part_that_is_wrong(client: ServiceClient) -> None:
    """The token, then the body's size, then the route, then what the route reads, all of it."""

    def oversized(url: str, headers: dict[str, str]) -> int:
        answer = client.service.handle(replace(request("POST", url, headers), oversized=True))
        assert isinstance(answer, Response)
        return answer.status

    assert oversized("/ledgers/l/effects", {"Authorization": f"Bearer {TOKEN}"}) == 413
    assert oversized("/ledgers/l/effects", WRONG) == 401
    assert oversized("/nowhere", {"Authorization": f"Bearer {TOKEN}"}) == 413
    everything = client.answer(
        "POST",
        "/ledgers/" + "n" * 201 + "/effects",
        {"Idempotency-Key": "bad key", "X-Testbed-Attempt": "x", "Content-Type": "application/json"},
        body=b"[]",
    )
    assert everything.body == {"error": "malformed request (body, header, path)"}
    log = client.answer("GET", "/ledgers/l/log?after=-1")
    assert log.body == {"error": "malformed request (query)"}


def test_errors_do_not_echo_the_input(client: ServiceClient) -> None:
    marker = "MARKER-" + "z" * 40
    answers = [
        client.answer("POST", "/ledgers/l/effects", json={**BODY, marker: marker}),
        client.answer("POST", "/ledgers/l/effects", json={**BODY, "reference": marker * 10}),
        client.answer("POST", "/ledgers/l/effects", {"Content-Type": "application/json"}, body=marker.encode()),
        client.answer("POST", "/ledgers/l/effects", {"Idempotency-Key": marker + " "}, json=BODY),
        client.answer("POST", f"/ledgers/{marker}/effects", json=BODY),
        client.answer("GET", f"/ledgers/{marker * 5}/effects/op-1"),
        client.answer("GET", f"/{marker}"),
    ]
    assert [a.status for a in answers] == [400, 400, 400, 400, 404, 400, 404]
    assert not [a.body for a in answers if marker in json.dumps(a.body)]


def test_reads_withdrawals_the_clock_and_the_audit(client: ServiceClient) -> None:
    assert client.answer("GET", "/ledgers/l/effects/op-1").body == {"found": False, "inFlight": False}
    sent = client.answer("POST", "/ledgers/l/effects", json=BODY).body
    found = client.answer("GET", "/ledgers/l/effects/op-1")
    assert found.status == 200 and found.body["id"] == sent["id"]
    listed = client.answer("GET", "/ledgers/l/effects?reference=x&reference=op-1").body  # the last one, as before
    assert [e["id"] for e in listed["data"]] == [sent["id"]]
    assert client.answer("POST", "/ledgers/l/effects/op-1/withdraw").body == {"withdrawn": 1}
    assert client.answer("GET", "/ledgers/l/effects/op-1").status == 410
    assert client.answer("POST", "/ledgers/l/clock", json={"advance_seconds": 2}).body == {"offsetSeconds": 2.0}
    page = client.answer("GET", "/ledgers/l/log?limit=1").body
    assert [e["reference"] for e in page["effects"]] == ["op-1"] and page["next"] == 1
    audit = client.answer("POST", "/ledgers/l/audit", json={"references": ["op-1", "op-9"]}).body
    assert audit["effects"] == 1 and set(audit["records"]) == {"op-1"}
    assert audit["records"]["op-1"]["withdrawn"] == 1
    client.answer("PUT", "/ledgers/n", json={"single_lookup": False})
    assert client.answer("GET", "/ledgers/n/effects/op-1").status == 501


def test_the_document_is_the_route_tables_and_needs_no_server() -> None:
    protected, open_doc = document(), document(protected=False)
    operations = {op.name for resource in ROUTES.resources for op in resource.operations}
    assert {o["operationId"] for ops in protected["paths"].values() for o in ops.values()} == operations
    assert "securitySchemes" not in open_doc["components"]
    assert not [o for ops in open_doc["paths"].values() for o in ops.values() if "401" in o["responses"]]
    send = protected["paths"]["/ledgers/{ledger}/effects"]["post"]
    assert {p["name"] for p in send["parameters"]} == {
        "ledger",
        "idempotency-key",
        "x-testbed-attempt",
        "x-testbed-chaos",
    }
    assert send["responses"]["413"]["description"] == f"request body over {MAX_BODY} bytes"
    assert json.loads(json.dumps(protected)) == protected  # plain JSON


def test_a_jobs_request_to_its_destination_may_carry_an_upload_and_past_that_is_the_labs_failure(
    client: ServiceClient,
) -> None:
    """The larger cap only for a request its scope's token signs; one past it is refused (413)
    and noted as the provider's own failure (which ends the run), never passed on cut short."""
    secret = "s" * 32
    assert client.answer("PUT", "/ledgers/l/scope", json={"secret": secret}).status == 200
    good = f"/d/{sign(Scope('l', 'op-1', 1), secret)}/upload"
    bad = f"/d/{sign(Scope('l', 'op-1', 1), 'x' * 32)}/upload"
    assert client.service.body_cap(Request("PUT", good)) == MAX_FORWARDED_BODY
    assert client.service.body_cap(Request("PUT", bad)) == MAX_BODY
    assert client.service.body_cap(Request("PUT", "/ledgers/l")) == MAX_BODY
    refused = client.service.handle(Request("PUT", good, oversized=True))
    assert isinstance(refused, Response) and refused.status == 413 and refused.close
    assert str(MAX_FORWARDED_BODY) in refused.body["error"]
    assert client.service.failures.count == 1 and client.service.failures.last == refused.body["error"]
    stranger = client.service.handle(Request("PUT", bad, oversized=True))
    assert isinstance(stranger, Response) and stranger.status == 413
    assert client.service.failures.count == 1  # a stranger's request is no failure of the lab's
