"""What the provider's requests and answers carry: their bounds, and the shapes of their JSON.

Requests: the bodies of the routes that take one, and the armed hit a job's send
carries in a header. Answers: their bodies, as the OpenAPI document describes them
(the service writes each as a plain dict; the schema run holds it to its shape).
Each is declared once, as a `provider.shapes` shape: what checks a request is
what the document says of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, get_type_hints

from labcore.destination import MAX_RULES, MAX_URL, BadDestination, Destination, Effects, parse_url
from labcore.events import Hit
from provider.contract import Contract
from provider.shapes import (
    ABSENT,
    REQUIRED,
    AnyJson,
    Choice,
    Flag,
    Integer,
    Invalid,
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
# A job's own request to its destination, through the proxy: an SDK's upload in one request
# (boto3's S3 transfers go in parts of 8 MiB; a single PutObject of this much). Past it the
# proxy refuses the request (413) and the provider notes the failure, which ends the run: a
# request the lab could not pass on is never judged as the job's.
MAX_FORWARDED_BODY = 16 * 1024 * 1024
MAX_KEY = 255  # Stripe's limit for Idempotency-Key
MAX_NAME = 200  # ledger names and references
MAX_ATTEMPT = 1_000_000  # far above any Retry(max=N); keeps the log's INTEGER column in range
MAX_SECONDS = 10 * 365 * 86_400.0  # retention, listing lag, one clock step: finite and bounded
MAX_CHAOS = 8192  # the armed hit's header
MAX_REFERENCES = 1000  # one audit's references
CHAOS = "x-testbed-chaos"

NAME = Text(min_length=1, max_length=MAX_NAME)
# Printable ASCII without spaces: what a header carries unchanged through every client and proxy.
KEY = Text(min_length=1, max_length=MAX_KEY, pattern="[!-~]+")
ATTEMPT = Integer(1, MAX_ATTEMPT)


class Fields(dict[bytes, bytes]):
    """A request's header fields, by lower-case name: the first of a repeated one, as the routes
    and effect rules read them; `repeated`, the others in the order sent, which the proxy passes
    on too (a field sent twice is two lines at the destination, as it was here)."""

    __slots__ = ("repeated",)

    def __init__(self, lines: Iterable[tuple[bytes, bytes]] = ()) -> None:
        super().__init__()
        self.repeated: list[tuple[bytes, bytes]] = []
        for name, value in lines:
            self.add(name, value)

    def add(self, name: bytes, value: bytes) -> None:
        if name in self:
            self.repeated.append((name, value))
        else:
            self[name] = value

    def lines(self) -> list[tuple[bytes, bytes]]:
        """Every field as sent: a name's values stay in their order."""
        return [*self.items(), *self.repeated]


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


def _destination(fields: dict[str, Any]) -> Destination:
    try:
        return Destination(parse_url(fields["url"]), Effects.parse(fields["effects"]))
    except BadDestination:
        raise Invalid from None


# What `labcore.destination.parse_url` takes, as the document says it: http(s), a host (a name or
# an IPv4 address; an IPv6 literal is taken, not documented), a port in range, a path; no query,
# fragment or credentials. Or smtp, a host and a port, with no path.
_PORT = "([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
URL_PATTERN = rf"(https?://[A-Za-z0-9._~-]+(:{_PORT})?(/[^?#@\x00-\x20]*)?|smtp://[A-Za-z0-9._~-]+(:{_PORT})?/?)"
# What `labcore.destination.parse_rule` takes: a 'Header: value', a field=value, or a METHOD [/path*].
RULE_PATTERN = r"\s*([!#$%&'*+.^_`|~0-9A-Za-z-]+\s*:[\s\S]*|[^=\s]+=[\s\S]*|[A-Z]+( +/[\s\S]*)?\s*)"
DESTINATION_BODY: Object[Destination] = Object(
    "DestinationBody",
    (
        Property(
            "url", Text(min_length=1, max_length=MAX_URL, pattern=URL_PATTERN), description="the destination's base URL"
        ),
        Property(
            "effects",
            Items(Text(min_length=1, max_length=500, pattern=RULE_PATTERN), MAX_RULES),
            default=[],
            description="which requests are effects (labcore.destination); none: POST, PUT, PATCH and DELETE",
        ),
    ),
    _destination,
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
# `failures`: the provider's own since it started (a log it could not write...), the last one named.
HEALTH = _answer("Health", ("status", STRING), ("failures", COUNT), ("failure", Nullable(STRING)))
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
# The destination as the provider keeps it: each rule spelled as it reads it ('name: value'), which
# may be a character longer than the rule as given.
DESTINATION_KEPT = _answer("DestinationKept", ("url", STRING), ("effects", Items(STRING, MAX_RULES)))
DESTINATION = _answer("DestinationOut", ("ledger", STRING), ("destination", DESTINATION_KEPT))
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
