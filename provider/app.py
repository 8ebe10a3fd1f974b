"""The provider's HTTP API.

Sends:    POST /ledgers/{ledger}/effects            (Idempotency-Key optional)
Reads:    GET  /ledgers/{ledger}/effects/{reference} strongly consistent: 200 / 404 / 410 / 409
          GET  /ledgers/{ledger}/effects?reference=  listing: may lag, omits withdrawn effects
Admin:    PUT  /ledgers/{ledger}                     create or reconfigure (the contract)
          POST /ledgers/{ledger}/clock               advance the ledger's clock (key expiry)
          POST /ledgers/{ledger}/effects/{reference}/withdraw

Every route but /health needs the run's bearer token (when the provider has
one). A request is parsed and checked whole (headers, body) before the store
claims its key, so a rejected request changes nothing and holds no key; bad
input gets 400, an oversized body 413, and no error repeats the input.
Scoped:   /s/{token}/...  a user's own job, any HTTP client (provider/api.py)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from enum import Enum
from http import HTTPStatus
from typing import Annotated, Any

from fastapi import FastAPI, Header, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from labcore.credentials import matches
from labcore.payloads import fingerprint
from labcore.receipts import receipt
from labcore.scoped import ROOT
from provider import audit, fast
from provider.api import scoped_router
from provider.holds import Holds
from provider.ledger import Answer, SendTicket
from provider.responses import REPLAYED, json_response
from provider.store import LogReader, Store, UnknownLedger
from provider.wire import (
    CHAOS,
    MAX_ATTEMPT,
    MAX_BODY,
    MAX_CHAOS,
    MAX_KEY,
    MAX_NAME,
    ClockBody,
    ContractBody,
    HitHeader,
    SendBody,
    hit_of,
)

OPEN_PATHS = frozenset({"/health"})  # answers "ok" and nothing else
SCOPED = f"{ROOT}/"  # users' jobs' signed URLs: checked by their signature (provider/api.py)

ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Any]


# -- response bodies, for the OpenAPI document ------------------------------


class ErrorBody(BaseModel):
    error: str


class Receipt(BaseModel):
    id: str
    reference: str


class Declined(BaseModel):
    error: str
    reference: str


class Found(BaseModel):
    found: bool
    id: str
    fingerprint: str


class NotFound(BaseModel):
    found: bool
    inFlight: bool


class LedgerOut(BaseModel):
    ledger: str
    contract: dict[str, Any]


class Listing(BaseModel):
    data: list[dict[str, str]]


class LoggedEffect(BaseModel):
    id: str
    reference: str
    idempotencyKey: str | None
    fingerprint: str
    appliedAt: float
    withdrawnAt: float | None


class Log(BaseModel):
    effects: list[LoggedEffect]
    next: int | None  # pass as `after` for the next page; null: the end of the log


class Health(BaseModel):
    status: str


class Offset(BaseModel):
    offsetSeconds: float


class Withdrawn(BaseModel):
    withdrawn: int


_REPLAY_HEADER = {REPLAYED: {"description": "present on a replayed response", "schema": {"type": "string"}}}
_BAD = {400: {"model": ErrorBody, "description": "malformed header, path, query or body"}}
_NO_LEDGER = {404: {"model": ErrorBody, "description": "unknown ledger"}}

LedgerName = Annotated[str, Path(min_length=1, max_length=MAX_NAME)]
Reference = Annotated[str, Path(min_length=1, max_length=MAX_NAME)]
# Printable ASCII without spaces: what a header carries unchanged through every client and proxy.
IdempotencyKey = Annotated[str | None, Header(min_length=1, max_length=MAX_KEY, pattern=r"^[!-~]+$")]
Attempt = Annotated[int | None, Header(ge=1, le=MAX_ATTEMPT, description="the client's attempt number, for the log")]
Chaos = Annotated[
    str | None, Header(max_length=MAX_CHAOS, description="the lab's armed fault (JSON); absent otherwise")
]


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its own `$defs` put in place: a schema inside a
    parameter cannot refer to definitions at its own root."""
    defs = schema.pop("$defs", {})

    def place(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref", "")
            if ref.startswith("#/$defs/"):
                return place(defs[ref.removeprefix("#/$defs/")])
            return {k: place(v) for k, v in node.items()}
        if isinstance(node, list):
            return [place(v) for v in node]
        return node

    return place(schema)


def _malformed(where: list[str]) -> JSONResponse:
    # Only the parts of the request that were wrong: never their values.
    return json_response(400, {"error": f"malformed request ({', '.join(sorted(set(where))) or 'request'})"})


class Guard:
    """The outermost layer: the token, then the body's size, before the app reads a byte of it.

    The body is buffered here (at most MAX_BODY) and handed on whole, so an
    oversized body is refused without being read, whether or not it declares
    its length."""

    def __init__(self, app: ASGIApp, token: str | None, max_body: int = MAX_BODY) -> None:
        self._app = app
        self._token = token
        self._max = max_body

    async def __call__(self, scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        declared = headers.get(b"content-length")
        oversized = declared is not None and declared.isdigit() and int(declared) > self._max
        if self._token is not None and scope["path"] not in OPEN_PATHS and not scope["path"].startswith(SCOPED):
            presented = headers.get(b"authorization")
            if not matches(None if presented is None else presented.decode("latin-1"), self._token):
                # A body within the cap is read first, and dropped: bytes that reach a connection
                # already closed make the kernel reset it, and the client could lose the 401.
                if not oversized and await _body(receive, self._max) is _Cut.GONE:
                    return
                await _refuse(send, 401, "missing or wrong bearer token", [(b"www-authenticate", b"Bearer")])
                return
        body = _Cut.OVER if oversized else await _body(receive, self._max)  # declared oversize: not read
        if body is _Cut.GONE:
            return
        if body is _Cut.OVER:
            await _refuse(send, 413, f"request body over {self._max} bytes")
            return
        await self._app(scope, _replay(body, receive), send)


class _Cut(Enum):
    GONE = "the client went away"
    OVER = "the body ran past the cap: read no further"


async def _body(receive: Callable[[], Awaitable[Any]], limit: int) -> bytes | _Cut:
    """The request's body whole, or why there is none."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return _Cut.GONE
        body += message.get("body", b"")
        if len(body) > limit:
            return _Cut.OVER
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Any) -> Callable[[], Awaitable[Any]]:
    sent = False

    async def replayed() -> Any:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later calls wait for the disconnect, as the server's own receive does

    return replayed


async def _refuse(send: Any, status: int, error: str, extra: list[tuple[bytes, bytes]] | None = None) -> None:
    # Connection: close, so the server stops reading whatever body the client is still sending.
    response = JSONResponse({"error": error}, status_code=status, headers={"Connection": "close"})
    response.raw_headers.extend(extra or [])
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Any:  # pragma: no cover (a plain JSONResponse never reads the request)
    return {"type": "http.disconnect"}


def create_app(store: Store, holds: Holds, token: str | None = None) -> ASGIApp:
    """Endpoints run on the event loop: each store call is a short critical
    section; only requests armed with a fault block, and those go to a thread.
    With a token, every route but /health requires `Authorization: Bearer <token>`."""
    app = FastAPI(title="testbed provider", version="1", docs_url=None, redoc_url=None)

    @app.exception_handler(RequestValidationError)
    def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        # 422 means "key reused with another payload" here; malformed requests get 400.
        return _malformed([str(e["loc"][0]) for e in exc.errors() if e.get("loc")])

    @app.exception_handler(HTTPException)
    def _http_error(request: Request, exc: HTTPException) -> JSONResponse:
        # The framework's own refusals (an unreadable body, no such route), in this API's error shape.
        if exc.status_code == 400:
            return _malformed(["body"])
        headers = exc.headers
        if exc.status_code == 405:
            # The router names the methods of the first route whose path matched; a path has several.
            path = request.scope["path"]
            methods = {m for r in app.routes if isinstance(r, APIRoute) and r.path_regex.match(path) for m in r.methods}
            headers = {"Allow": ", ".join(sorted(methods))}
        error = {"error": HTTPStatus(exc.status_code).phrase.lower()}
        return JSONResponse(error, status_code=exc.status_code, headers=headers)

    @app.exception_handler(UnknownLedger)
    def _unknown(_: Request, exc: UnknownLedger) -> JSONResponse:
        return json_response(fast.UNKNOWN_LEDGER.status, fast.UNKNOWN_LEDGER.body)

    @app.get("/health", response_model=Health)
    async def health() -> dict[str, Any]:
        return fast.HEALTH.body

    @app.put("/ledgers/{ledger}", response_model=LedgerOut, responses=_BAD)
    async def put_ledger(ledger: LedgerName, body: ContractBody) -> dict[str, Any]:
        return fast.put_ledger(store, ledger, body).body

    @app.post(
        "/ledgers/{ledger}/effects",
        status_code=201,
        response_model=Receipt,
        responses={
            201: {"description": "applied, or the stored response replayed", "headers": _REPLAY_HEADER},
            402: {"model": Declined, "description": "declined for good (replayed too)", "headers": _REPLAY_HEADER},
            409: {"model": ErrorBody, "description": "a request with this key is in flight"},
            422: {"model": ErrorBody, "description": "this key was used with another payload"},
            503: {"model": ErrorBody, "description": "an armed request the lab abandoned (chaos runs only)"},
            **_BAD,
            **_NO_LEDGER,
        },
    )
    async def send(
        ledger: LedgerName,
        body: SendBody,
        idempotency_key: IdempotencyKey = None,
        x_testbed_attempt: Attempt = None,
        x_testbed_chaos: Chaos = None,
    ) -> JSONResponse:
        hit = None
        if x_testbed_chaos:
            try:
                hit = hit_of(x_testbed_chaos)
            except ValidationError:
                return _malformed(["header"])
        payload = body.model_dump()
        ticket = SendTicket(ledger, body.reference, idempotency_key, fingerprint(payload), x_testbed_attempt)
        answer = fast.send_or_hold(store, holds, ticket, payload, hit)
        if not isinstance(answer, Answer):  # an armed request: holding it blocks, so it leaves the event loop
            answer = await run_in_threadpool(answer)
        return json_response(answer.status, answer.body, answer.replayed)

    @app.get(
        "/ledgers/{ledger}/effects/{reference}",
        response_model=Found,
        responses={
            404: {"model": NotFound | ErrorBody, "description": "never applied (or unknown ledger)"},
            409: {"model": NotFound, "description": "not applied yet: a send is in flight"},
            410: {"model": Found, "description": "applied, then withdrawn"},
            501: {"model": ErrorBody, "description": "this ledger offers no lookup by reference"},
            **_BAD,
        },
    )
    async def lookup(ledger: LedgerName, reference: Reference) -> JSONResponse:
        if not store.contract(ledger).single_lookup:
            return json_response(501, {"error": "this provider offers no lookup by reference"})
        status, effect = store.lookup(ledger, reference)
        if effect is None:
            return json_response(status, {"found": False, "inFlight": status == 409})
        return json_response(
            status, {"found": status == 200, "id": receipt(effect.id), "fingerprint": effect.fingerprint}
        )

    @app.get("/ledgers/{ledger}/effects", response_model=Listing, responses={**_BAD, **_NO_LEDGER})
    async def listing(
        ledger: LedgerName,
        reference: Annotated[str, Query(min_length=1, max_length=MAX_NAME)],
    ) -> JSONResponse:
        rows = store.listing(ledger, reference)
        data = [{"id": receipt(e.id), "reference": reference, "fingerprint": e.fingerprint} for e in rows]
        return json_response(200, {"data": data})

    @app.get("/ledgers/{ledger}/log", response_model=Log, responses={**_BAD, **_NO_LEDGER})
    async def log(
        ledger: LedgerName,
        after: Annotated[int, Query(ge=0, le=2**62, description="list effects after this log position")] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> dict[str, Any]:
        """The ledger's whole effect log, in order, a page at a time (withdrawn effects included)."""
        rows = store.log(ledger, after, limit)
        effects = [
            {
                "id": receipt(r.id),
                "reference": r.reference,
                "idempotencyKey": r.key,
                "fingerprint": r.fingerprint,
                "appliedAt": r.applied_at,
                "withdrawnAt": r.withdrawn_at,
            }
            for r in rows
        ]
        return {"effects": effects, "next": rows[-1].id if len(rows) == limit else None}

    @app.post("/ledgers/{ledger}/clock", response_model=Offset, responses={**_BAD, **_NO_LEDGER})
    async def advance_clock(ledger: LedgerName, body: ClockBody) -> dict[str, float]:
        return {"offsetSeconds": store.advance_clock(ledger, body.advance_seconds)}

    @app.post(
        "/ledgers/{ledger}/effects/{reference}/withdraw",
        response_model=Withdrawn,
        responses={**_BAD, **_NO_LEDGER},
    )
    async def withdraw(ledger: LedgerName, reference: Reference) -> dict[str, int]:
        return {"withdrawn": store.withdraw(ledger, reference)}

    # Users' own jobs, on per-attempt signed URLs: the signature is their credential.
    app.include_router(scoped_router(store, holds))
    app.openapi = lambda: _document(app, protected=token is not None)  # type: ignore[method-assign]
    app.include_router(audit.router(LogReader(store.path), _BAD))  # the checker's view from another host
    return Guard(app, token)


def _document(app: FastAPI, protected: bool) -> dict[str, Any]:
    """FastAPI's document, plus what the guard answers before any route runs
    (401, 413), minus FastAPI's 422 for validation errors (this API says 400),
    and with optional headers and queries typed as what they are on the wire
    (a header is absent, never `null`)."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    doc = get_openapi(title=app.title, version=app.version, routes=app.routes)
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorBody"}}}
    for path, operations in doc["paths"].items():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                _drop_null(parameter["schema"])
                if parameter["name"] == CHAOS:  # JSON in a header: say so, with its schema
                    del parameter["schema"]
                    parameter["content"] = {"application/json": {"schema": _inlined(HitHeader.model_json_schema())}}
            responses = operation["responses"]
            if "HTTPValidationError" in str(responses.get("422", "")):
                del responses["422"]
            responses["413"] = {"description": f"request body over {MAX_BODY} bytes", "content": error}
            if protected and path not in OPEN_PATHS:
                header = {"WWW-Authenticate": {"schema": {"type": "string"}}}
                responses["401"] = {"description": "missing or wrong bearer token", "content": error, "headers": header}
                operation["security"] = [{"bearer": []}]
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    if protected:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    app.openapi_schema = doc
    return doc


def _drop_null(schema: dict[str, Any]) -> None:
    """`anyOf: [X, null]` (FastAPI's rendering of `X | None`) becomes X."""
    variants = [v for v in schema.get("anyOf", []) if v.get("type") != "null"]
    if len(variants) == 1 and len(schema["anyOf"]) == 2:
        del schema["anyOf"]
        schema.update(variants[0])
