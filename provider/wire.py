"""The provider's requests as they arrive: their bounds, the models of their bodies and of the armed hit's header;
and the shapes (`provider.shapes`) that check them, and the answers' bodies, from one declaration each.

Parsed with these models by the app's routes (`provider.app`) and by the
server's protocol for the requests it answers itself (`provider.fast`):
pydantic's, without the framework, whose import is most of a provider's
start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import MISSING
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, ConfigDict, Field, create_model

from labcore.events import Hit
from provider.contract import Contract
from provider.shapes import (
    ABSENT,
    REQUIRED,
    AnyJson,
    Choice,
    Flag,
    Integer,
    Items,
    JsonText,
    Nullable,
    Number,
    Object,
    Property,
    Shape,
    Table,
    Text,
    as_dict,
)

MAX_BODY = 64 * 1024  # every legitimate body is under 11 KiB
MAX_KEY = 255  # Stripe's limit for Idempotency-Key
MAX_NAME = 200  # ledger names and references
MAX_ATTEMPT = 1_000_000  # far above any Retry(max=N); keeps the log's INTEGER column in range
MAX_SECONDS = 10 * 365 * 86_400.0  # retention, listing lag, one clock step: finite and bounded
MAX_CHAOS = 8192  # the armed hit's header
MAX_REFERENCES = 1000  # one audit's references
CHAOS = "x-testbed-chaos"

# Strict: a boolean is not a number, a number is not a string; unknown fields are errors.
STRICT = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class SendBody(BaseModel):
    model_config = STRICT
    reference: str = Field(min_length=1, max_length=MAX_NAME)
    recipient: str = Field(min_length=1, max_length=320)
    message: str = Field(max_length=10_000)


class ContractBody(BaseModel):
    model_config = STRICT
    dedup: bool = True
    retention_seconds: float = Field(default=86_400.0, gt=0, le=MAX_SECONDS)
    single_lookup: bool = True
    listing_lag_seconds: float = Field(default=0.0, ge=0, le=MAX_SECONDS)
    decline_domain: str = Field(default="", max_length=253)


class ClockBody(BaseModel):
    model_config = STRICT
    advance_seconds: float = Field(gt=0, le=MAX_SECONDS)


def _wire_model(cls: type[Any]) -> type[BaseModel]:
    """A strict, bounded model of a flat dataclass (str, int and float fields), for checking its JSON."""
    bounds = {str: Field(max_length=128), int: Field(ge=0, le=2**31), float: Field(ge=0, le=1e12)}
    hints = get_type_hints(cls)
    fields: dict[str, Any] = {
        f.name: (
            Annotated[hints[f.name], bounds[hints[f.name]]] if hints[f.name] in bounds else hints[f.name],
            ... if f.default is MISSING else f.default,
        )
        for f in dataclasses.fields(cls)
    }
    return create_model(f"{cls.__name__}Header", __config__=STRICT, **fields)


HitHeader = _wire_model(Hit)


def hit_of(header: str | bytes) -> Hit:
    """The armed hit a request's header carries; pydantic's ValidationError if it is not one."""
    return Hit(**HitHeader.model_validate_json(header).model_dump())


NAME = Text(min_length=1, max_length=MAX_NAME)
# Printable ASCII without spaces: what a header carries unchanged through every client and proxy.
KEY = Text(min_length=1, max_length=MAX_KEY, pattern="[!-~]+")
ATTEMPT = Integer(1, MAX_ATTEMPT)


def _properties(cls: type[Any], shapes: dict[str, Shape[Any]]) -> tuple[Property, ...]:
    """A dataclass's fields as properties: each with its shape, and the field's own default."""
    return tuple(
        Property(f.name, shapes[f.name], REQUIRED if f.default is dataclasses.MISSING else f.default)
        for f in dataclasses.fields(cls)
    )


# -- request bodies -----------------------------------------------------------------

SEND_BODY = Object(
    "SendBody",
    (
        Property("reference", NAME),
        Property("recipient", Text(min_length=1, max_length=320)),
        Property("message", Text(max_length=10_000)),
    ),
    as_dict,
)

CONTRACT_BODY = Object(
    "ContractBody",
    _properties(
        Contract,
        {
            "dedup": Flag(),
            "retention_seconds": Number(exclusive_minimum=0, maximum=MAX_SECONDS),
            "single_lookup": Flag(),
            "listing_lag_seconds": Number(minimum=0, maximum=MAX_SECONDS),
            "decline_domain": Text(max_length=253),
        },
    ),
    lambda fields: Contract(**fields),
)

CLOCK_BODY: Object[float] = Object(
    "ClockBody",
    (Property("advance_seconds", Number(exclusive_minimum=0, maximum=MAX_SECONDS)),),
    lambda fields: fields["advance_seconds"],
)

SCOPE_BODY: Object[str] = Object(
    "ScopeBody",
    (Property("secret", Text(min_length=16, max_length=200)),),
    lambda fields: fields["secret"],
)

AUDIT_BODY: Object[list[str]] = Object(
    "AuditBody",
    (Property("references", Items(NAME, MAX_REFERENCES)),),
    lambda fields: fields["references"],
)


def _hit_shape() -> Object[Hit]:
    """The armed hit as its header carries it: the Hit record's fields, each bounded by its type."""
    by_type: dict[object, Shape[Any]] = {
        str: Text(max_length=128),
        int: Integer(0, 2**31),
        float: Number(minimum=0, maximum=1e12),
    }
    hints = get_type_hints(Hit)
    shapes = {f.name: by_type.get(hints[f.name]) or Choice(hints[f.name]) for f in dataclasses.fields(Hit)}
    return Object("HitHeader", _properties(Hit, shapes), lambda fields: Hit(**fields))


HIT_HEADER = JsonText(_hit_shape(), MAX_CHAOS)

# -- answer bodies (for the document) ---------------------------------------------------


def _answer(name: str, *properties: tuple[str, Shape[Any]]) -> Object[dict[str, Any]]:
    """An answer's body: every property always there; open, as answers may grow."""
    return Object(name, tuple(Property(n, s) for n, s in properties), as_dict, closed=False)


STRING, TRUTH, COUNT = Text(), Flag(), Integer(0, 2**63 - 1)
ERROR = _answer("ErrorBody", ("error", STRING))
HEALTH = _answer("Health", ("status", STRING))
LEDGER = _answer("LedgerOut", ("ledger", STRING), ("contract", CONTRACT_BODY))
RECEIPT = _answer("Receipt", ("id", STRING), ("reference", STRING))
DECLINED = _answer("Declined", ("error", STRING), ("reference", STRING))
FOUND = _answer("Found", ("found", TRUTH), ("id", STRING), ("fingerprint", STRING))
NOT_FOUND = _answer("NotFound", ("found", TRUTH), ("inFlight", TRUTH))
LISTED = _answer("ListedEffect", ("id", STRING), ("reference", STRING), ("fingerprint", STRING))
LISTING = _answer("Listing", ("data", Items(LISTED)))
LOGGED = _answer(
    "LoggedEffect",
    ("id", STRING),
    ("reference", STRING),
    ("idempotencyKey", Nullable(STRING)),
    ("fingerprint", STRING),
    ("appliedAt", Number()),
    ("withdrawnAt", Nullable(Number())),
)
LOG = Object(
    "Log",
    (
        Property("effects", Items(LOGGED)),
        Property("next", Nullable(COUNT), description="pass as `after` for the next page; null: the end of the log"),
    ),
    as_dict,
    closed=False,
)
OFFSET = _answer("Offset", ("offsetSeconds", Number()))
WITHDRAWN = _answer("Withdrawn", ("withdrawn", COUNT))
SCOPE = _answer("ScopeOut", ("ledger", STRING))
COUNTS = _answer(
    "Counts", ("effects", COUNT), ("withdrawn", COUNT), ("declined", COUNT), ("sends", COUNT), ("lookups", COUNT)
)
AUDIT = _answer("Audit", ("effects", COUNT), ("records", Table(COUNTS)))
DOCUMENT = Table(AnyJson())
# A user's job's view of its own op (the scoped routes).
SCOPED_LOOKUP = Object(
    "ScopedLookup",
    (
        Property("found", TRUTH),
        Property("inFlight", TRUTH),
        Property("id", STRING, default=ABSENT, description="once applied"),
        Property("withdrawn", TRUTH, default=ABSENT, description="once applied"),
    ),
    as_dict,
    closed=False,
)
SCOPED_LISTED = _answer("ScopedListedEffect", ("id", STRING), ("reference", STRING))
SCOPED_LISTING = _answer("ScopedListing", ("data", Items(SCOPED_LISTED)))
