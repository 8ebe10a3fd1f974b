"""The provider's HTTP API.

Sends:    POST /ledgers/{ledger}/effects            (Idempotency-Key optional)
Reads:    GET  /ledgers/{ledger}/effects/{reference} strongly consistent: 200 / 404 / 410 / 409
          GET  /ledgers/{ledger}/effects?reference=  listing: may lag, omits withdrawn effects
Admin:    PUT  /ledgers/{ledger}                     create or reconfigure (the contract)
          POST /ledgers/{ledger}/clock               advance the ledger's clock (key expiry)
          POST /ledgers/{ledger}/effects/{reference}/withdraw
Scoped:   /s/{token}/...  a user's own job, any HTTP client (provider/api.py)
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Header, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from labcore.boundaries import Boundary
from labcore.bus import Hit
from labcore.faults import Release
from labcore.payloads import fingerprint
from provider.api import scoped_router
from provider.contract import Contract
from provider.holds import Holds
from provider.store import Answer, SendTicket, Store, UnknownLedger

REPLAYED = "Idempotent-Replayed"


class SendBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reference: str = Field(min_length=1, max_length=200)
    recipient: str = Field(min_length=1, max_length=320)
    message: str = Field(max_length=10_000)


class ContractBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dedup: bool = True
    retention_seconds: float = Field(default=86_400.0, gt=0)
    single_lookup: bool = True
    listing_lag_seconds: float = Field(default=0.0, ge=0)
    decline_domain: str = ""


class ClockBody(BaseModel):
    advance_seconds: float = Field(gt=0)


def _json(status: int, body: dict[str, Any], replayed: bool = False) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={REPLAYED: "true"} if replayed else None)


def _held_send(store: Store, holds: Holds, ticket: SendTicket, payload: dict[str, Any], hit: Hit) -> Answer:
    if holds.at(Boundary.BEFORE_EFFECT, hit) is Release.DROP:
        store.drop(ticket)
        holds.done(Boundary.BEFORE_EFFECT, hit)
        return Answer(503, {"error": "request abandoned"})
    answer = store.apply(ticket, payload)
    holds.done(Boundary.BEFORE_EFFECT, hit)
    holds.at(Boundary.AFTER_EFFECT, hit)
    holds.done(Boundary.AFTER_EFFECT, hit)
    return answer


def create_app(store: Store, holds: Holds) -> FastAPI:
    """Endpoints run on the event loop: each store call is a short critical
    section; only requests armed with a fault block, and those go to a thread."""
    app = FastAPI(title="testbed provider", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # 422 means "key reused with another payload" here; malformed requests get 400.
        return _json(400, {"error": "malformed request", "detail": str(exc.errors()[:3])})

    @app.exception_handler(UnknownLedger)
    def _unknown(_: Request, exc: UnknownLedger) -> JSONResponse:
        return _json(404, {"error": f"unknown ledger {exc.args[0]!r}"})

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.put("/ledgers/{ledger}")
    async def put_ledger(ledger: str, body: ContractBody) -> dict[str, Any]:
        contract = Contract(**body.model_dump())
        store.put_ledger(ledger, contract)
        return {"ledger": ledger, "contract": contract.to_dict()}

    @app.post("/ledgers/{ledger}/effects")
    async def send(
        ledger: str,
        body: SendBody,
        idempotency_key: str | None = Header(default=None),
        x_testbed_attempt: int | None = Header(default=None),
        x_testbed_chaos: str | None = Header(default=None),
    ) -> JSONResponse:
        payload = body.model_dump()
        ticket = SendTicket(ledger, body.reference, idempotency_key, fingerprint(payload), x_testbed_attempt)
        early = store.admit(ticket)
        if early is not None:
            return _json(early.status, early.body, early.replayed)
        if not x_testbed_chaos:
            answer = store.apply(ticket, payload)
            return _json(answer.status, answer.body)
        # An armed request: holding it blocks, so it leaves the event loop.
        hit = Hit.from_header(x_testbed_chaos)
        answer = await run_in_threadpool(_held_send, store, holds, ticket, payload, hit)
        return _json(answer.status, answer.body)

    @app.get("/ledgers/{ledger}/effects/{reference}")
    async def lookup(ledger: str, reference: str, x_testbed_attempt: int | None = Header(default=None)) -> JSONResponse:
        if not store.contract(ledger).single_lookup:
            return _json(501, {"error": "this provider offers no lookup by reference"})
        status, effect = store.lookup(ledger, reference, x_testbed_attempt)
        if effect is None:
            return _json(status, {"found": False, "inFlight": status == 409})
        return _json(status, {"found": status == 200, "id": f"eff_{effect.id}", "fingerprint": effect.fingerprint})

    @app.get("/ledgers/{ledger}/effects")
    async def listing(
        ledger: str, reference: str, x_testbed_attempt: int | None = Header(default=None)
    ) -> JSONResponse:
        rows = store.listing(ledger, reference, x_testbed_attempt)
        data = [{"id": f"eff_{e.id}", "reference": reference, "fingerprint": e.fingerprint} for e in rows]
        return _json(200, {"data": data})

    @app.post("/ledgers/{ledger}/clock")
    async def advance_clock(ledger: str, body: ClockBody) -> dict[str, float]:
        return {"offsetSeconds": store.advance_clock(ledger, body.advance_seconds)}

    @app.post("/ledgers/{ledger}/effects/{reference}/withdraw")
    async def withdraw(ledger: str, reference: str) -> dict[str, int]:
        return {"withdrawn": store.withdraw(ledger, reference)}

    app.include_router(scoped_router(store, holds))
    return app
