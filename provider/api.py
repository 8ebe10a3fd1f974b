"""The provider's generic API for a user's own job, under a scoped base URL.

A user's job finds `{base}` = `{provider}/s/{token}` in `TESTBED_PROVIDER_URL`
(see `labcore.scoped`); the token attributes every call to its op and attempt.

Effects:  POST | PUT | PATCH | DELETE {base}/api/{any path}, JSON body (or none)
          Idempotency-Key honoured per the ledger's contract, as for the built-in
          send; the key's payload fingerprint covers method, path and body.
          201 {"id": "eff_N", "reference": op}; replays carry Idempotent-Replayed: true;
          409 the same key is in flight; 422 the same key with another request.
Lookup:   GET {base}/effects   strongly consistent, this op only:
          200 found / 404 never existed, nothing in flight / 410 withdrawn / 409 in flight
          (501 where the scenario offers no lookup)
Listing:  GET {base}/listing   {"data": [...]}: may lag, leaves withdrawn effects out
Admin:    PUT /ledgers/{ledger}/scope {"secret": ...}  the secret the ledger's tokens are signed with

A token may carry the attempt's armed provider-side fault: it holds the
attempt's first effect call only, whichever client makes it.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from labcore.events import Hit
from labcore.payloads import fingerprint
from labcore.receipts import receipt
from labcore.scoped import EFFECT_METHODS, ROOT, BadScope, Scope, read, verify
from provider.fast import held_send
from provider.holds import Holds
from provider.ledger import SendTicket
from provider.responses import json_response
from provider.store import Store


class ScopeBody(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    secret: str = Field(min_length=16, max_length=200)


def scoped_router(store: Store, holds: Holds) -> APIRouter:
    router = APIRouter()
    known: dict[str, str] = {}  # ledger -> its scope secret, read through from the store
    fired: set[str] = set()  # armed hits already used: each holds one request

    def scope_of(token: str) -> Scope:
        ledger = read(token).ledger
        secret = known.get(ledger) or store.scope_secret(ledger)
        if secret is None:
            raise BadScope(f"no scoped access to ledger {ledger!r}")
        known[ledger] = secret
        return verify(token, secret)

    def first_use(scope: Scope) -> Hit | None:
        if scope.hit is None:
            return None
        hit = Hit.from_header(scope.hit)
        if hit.hit in fired:
            return None
        fired.add(hit.hit)
        return hit

    @router.put(
        "/ledgers/{ledger}/scope",
        responses={400: {"description": "malformed request"}, 404: {"description": "unknown ledger"}},
    )
    async def put_scope(ledger: str, body: ScopeBody) -> dict[str, str]:
        store.put_scope_secret(ledger, body.secret)
        known[ledger] = body.secret
        return {"ledger": ledger}

    @router.api_route(ROOT + "/{token}/api/{path:path}", methods=sorted(EFFECT_METHODS), include_in_schema=False)
    async def effect(
        token: str, path: str, request: Request, idempotency_key: str | None = Header(default=None)
    ) -> JSONResponse:
        try:
            scope = scope_of(token)
        except BadScope as exc:
            return json_response(403, {"error": str(exc)})
        raw = await request.body()
        try:
            body = json.loads(raw) if raw.strip() else None
        except ValueError:
            return json_response(415, {"error": "an effect's body must be JSON"})
        # The stored effect is the request's body; a scenario that declines recipients reads it.
        payload = body if isinstance(body, dict) else {"body": body}
        key_fingerprint = fingerprint({"method": request.method, "path": f"/api/{path}", "body": body})
        ticket = SendTicket(scope.ledger, scope.reference, idempotency_key, key_fingerprint, scope.attempt)
        early = store.admit(ticket)
        if early is not None:
            return json_response(early.status, early.body, early.replayed)
        hit = first_use(scope)
        if hit is None:
            answer = store.apply(ticket, payload)
        else:  # holding blocks: off the event loop
            answer = await run_in_threadpool(held_send, store, holds, ticket, payload, hit)
        return json_response(answer.status, answer.body)

    @router.api_route(ROOT + "/{token}/api/{path:path}", methods=["GET", "HEAD"], include_in_schema=False)
    async def not_an_effect(token: str, path: str) -> JSONResponse:
        return json_response(
            405, {"error": "only POST, PUT, PATCH and DELETE under /api/ are effects; GET {base}/effects"}
        )

    @router.get(ROOT + "/{token}/effects", include_in_schema=False)
    async def lookup(token: str) -> JSONResponse:
        try:
            scope = scope_of(token)
        except BadScope as exc:
            return json_response(403, {"error": str(exc)})
        if not store.contract(scope.ledger).single_lookup:
            return json_response(501, {"error": "this provider offers no lookup by reference"})
        status, found = store.lookup(scope.ledger, scope.reference)
        body: dict[str, Any] = {"found": status == 200, "inFlight": status == 409}
        if found is not None:
            body |= {"id": receipt(found.id), "withdrawn": found.withdrawn}
        return json_response(status, body)

    @router.get(ROOT + "/{token}/listing", include_in_schema=False)
    async def listing(token: str) -> JSONResponse:
        try:
            scope = scope_of(token)
        except BadScope as exc:
            return json_response(403, {"error": str(exc)})
        rows = store.listing(scope.ledger, scope.reference)
        return json_response(200, {"data": [{"id": receipt(e.id), "reference": scope.reference} for e in rows]})

    return router
