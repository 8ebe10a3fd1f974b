"""The provider's routes as data, and a request read against them into its command.

Each resource is a path template with its operations: for each method, the
parameters read from the path, the query and the headers, the body taken, the
command made of them, and the answers given. A resource says whether its
requests are a job's (they pass the gate: `provider.gate`) and whether it is
open (no bearer token: the health check, and a user's job, whose credential is
its URL). The service reads every request against this table (`read`) and the
OpenAPI document is rendered from it (`provider.openapi`): what is documented is
what is checked.

A path is matched whole once percent-decoded: a parameter is one non-empty
segment between two "/" (or, for `{name:path}`, the rest of the path), and a
trailing "/" makes another path.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from urllib.parse import parse_qsl

from labcore.answers import REPLAYED, RETRY_AFTER
from labcore.scoped import DESTINATION_ROOT, EFFECT_METHODS, ROOT
from provider import commands, wire
from provider.shapes import Integer, Invalid, Object, Shape, Text, TextShape


class Source(StrEnum):
    """Where a parameter is read (and what a 400 names when it is malformed)."""

    PATH = "path"
    QUERY = "query"
    HEADER = "header"


BODY = "body"  # the other part of a request a 400 may name


@dataclass(frozen=True, slots=True)
class Param:
    name: str  # as on the wire; a header's in lower case
    source: Source
    shape: TextShape[Any]
    required: bool = False
    default: Any = None  # an absent optional parameter's value
    description: str = ""
    key: bytes | None = field(init=False, repr=False, compare=False)  # a header's name as the server hands it over

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", self.name.encode("latin-1") if self.source is Source.HEADER else None)


@dataclass(frozen=True, slots=True)
class Documented:
    """An answer as the document describes it: why it is given, its body's shapes, its headers."""

    description: str
    bodies: tuple[Shape[Any], ...] = ()
    headers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Operation:
    method: str
    name: str  # unique: the document's operationId
    summary: str
    # Made of the parameters' values, in their order, then the body's (`body`, or the bytes with `raw_body`).
    command: Callable[..., commands.Command]
    params: tuple[Param, ...] = ()
    body: Object[Any] | None = None  # a JSON body of this shape, required
    raw_body: bool = False  # the body as it came: the command reads it
    passed: bool = False  # the query, the headers and the body as they came: the command passes them on
    answers: Mapping[int, Documented] = field(default_factory=dict)
    named: tuple[Param, ...] = field(init=False, repr=False, compare=False)  # the query's and the headers'

    def __post_init__(self) -> None:
        object.__setattr__(self, "named", tuple(p for p in self.params if p.source is not Source.PATH))


@dataclass(frozen=True, slots=True)
class Resource:
    template: str
    operations: tuple[Operation, ...]
    gated: bool = False  # a job's requests: each passes the gate
    open: bool = False  # no bearer token
    refusal: str = "method not allowed"  # the 405's error, for any other method
    pattern: str = field(init=False, repr=False, compare=False)  # the template as a regular expression
    by_method: Mapping[str, Operation] = field(init=False, repr=False, compare=False)
    allow: bytes = field(init=False, repr=False, compare=False)  # the 405's Allow header

    def __post_init__(self) -> None:
        parts = self.template.split("/")
        names = [p[1:-1].removesuffix(":path") for p in parts if p.startswith("{")]
        pattern = "/".join(
            "(.*)" if p.endswith(":path}") else "([^/]+)" if p.startswith("{") else re.escape(p) for p in parts
        )
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "by_method", {op.method: op for op in self.operations})
        object.__setattr__(self, "allow", ", ".join(sorted(self.by_method)).encode())
        for op in self.operations:  # read in order, the path's parameters first: see `read`
            path_params = [p.name for p in op.params if p.source is Source.PATH]
            assert path_params == names == [p.name for p in op.params[: len(names)]], (self.template, op.name)


class Routes:
    def __init__(self, resources: Iterable[Resource]) -> None:
        self.resources = tuple(resources)
        # One expression for the table, each resource's a group of its own around its parameters':
        # the group that matched says which resource, the groups inside it hold the values.
        alternatives = []
        self._by_group: dict[int, tuple[Resource, tuple[int, ...]]] = {}
        group = 0
        for resource in self.resources:
            count = resource.pattern.count("(")
            self._by_group[group + 1] = (resource, tuple(range(group + 2, group + 2 + count)))
            alternatives.append(f"({resource.pattern})")
            group += 1 + count
        self._pattern = re.compile("|".join(alternatives), re.DOTALL)
        names = [op.name for r in self.resources for op in r.operations]
        assert len(names) == len(set(names)), names

    def match(self, path: str) -> tuple[Resource, tuple[str, ...]] | None:
        """The resource at a (percent-decoded) path, and its parameters' values."""
        found = self._pattern.fullmatch(path)
        if found is None:
            return None
        resource, groups = self._by_group[found.lastindex or 0]
        return resource, found.group(*groups) if len(groups) > 1 else (found.group(groups[0]),) if groups else ()


def read(
    operation: Operation, values: tuple[str, ...], query: str, headers: Mapping[bytes, bytes], body: bytes
) -> commands.Command | list[str]:
    """The request's command, or the parts of it that are malformed (`Source` values and BODY)."""
    args: list[Any] = []
    wrong: list[str] = []
    for param, value in zip(operation.params, values, strict=False):  # the path's parameters come first
        try:
            args.append(param.shape.parse(value))
        except Invalid:
            wrong.append(Source.PATH)
    queried: dict[str, str] | None = None
    for param in operation.named:
        text: str | None
        if param.key is not None:
            raw = headers.get(param.key)
            text = None if raw is None else raw.decode("latin-1")
        else:
            if queried is None:  # of a repeated name, its last value
                queried = dict(parse_qsl(query, keep_blank_values=True))
            text = queried.get(param.name)
        if text is None:
            if param.required:
                wrong.append(param.source)
            args.append(param.default)
        else:
            try:
                args.append(param.shape.parse(text))
            except Invalid:
                wrong.append(param.source)
    if operation.body is not None:
        try:
            args.append(operation.body.check(_json(body, headers.get(b"content-type"))))
        except Invalid:
            wrong.append(BODY)
    elif operation.raw_body:
        args.append(body)
    elif operation.passed:
        args += [query, headers, body]
    return wrong if wrong else operation.command(*args)


def _json(body: bytes, content_type: bytes | None) -> object:
    """A body declared JSON (application/json or application/*+json), parsed."""
    if not body or (content_type != b"application/json" and not _is_json(content_type)):
        raise Invalid
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested past the parser's depth
        raise Invalid from None


def _is_json(content_type: bytes | None) -> bool:
    """application/json or application/*+json, with any parameters."""
    if content_type is None:
        return False
    main, slash, sub = content_type.partition(b";")[0].strip().lower().partition(b"/")
    return slash == b"/" and main == b"application" and b"/" not in sub and (sub == b"json" or sub.endswith(b"+json"))


# -- the table ----------------------------------------------------------------------------

LEDGER = Param("ledger", Source.PATH, wire.NAME, required=True)
REFERENCE = Param("reference", Source.PATH, wire.NAME, required=True)
TOKEN = Param("token", Source.PATH, Text(min_length=1), required=True, description="the attempt's signed scope")

_ERROR = (wire.ERROR,)
_UNKNOWN_LEDGER = {404: Documented("unknown ledger", _ERROR)}
_REPLAYED = (REPLAYED,)
_SENT = {
    201: Documented("applied, or the stored response replayed", (wire.RECEIPT,), _REPLAYED),
    402: Documented("declined for good (replayed too)", (wire.DECLINED,), _REPLAYED),
    409: Documented("a request with this key is in flight", _ERROR),
    422: Documented("this key was used with another payload", _ERROR),
    503: Documented(
        "an armed request the lab abandoned (chaos runs only), or one turned away unprocessed", _ERROR, (RETRY_AFTER,)
    ),
}
_NO_LOOKUP = {501: Documented("this ledger offers no lookup by reference", _ERROR)}
_BAD_SCOPE = {403: Documented("a token not signed for its ledger", _ERROR)}
_SCOPED_SEND = (
    Param("path", Source.PATH, Text(), required=True, description="any path: the effect's own"),
    Param("idempotency-key", Source.HEADER, Text()),
)


def _scoped_sends() -> tuple[Operation, ...]:
    return tuple(
        Operation(
            method,
            f"scoped_{method.lower()}",
            "An effect of the scope's op: any JSON body (or none)",
            functools.partial(commands.ScopedSend, method),
            (TOKEN, *_SCOPED_SEND),
            raw_body=True,
            answers={**_SENT, **_BAD_SCOPE, 415: Documented("a body that is not JSON", _ERROR)},
        )
        for method in sorted(EFFECT_METHODS)
    )


# What a job may send to its destination through the lab: every method a client's SDK uses.
FORWARDED_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def _forwards() -> tuple[Operation, ...]:
    return tuple(
        Operation(
            method,
            f"forward_{method.lower()}",
            "A request of the scope's op to the ledger's destination, passed on whole; its answer, as given",
            functools.partial(commands.Forward, method),
            (TOKEN, Param("path", Source.PATH, Text(), required=True, description="any path, as sent")),
            passed=True,
            answers={
                200: Documented("the destination's answer, whatever its status"),
                **_BAD_SCOPE,
                404: Documented("no destination for the scope's ledger", _ERROR),
                413: Documented(
                    f"request body over {wire.MAX_FORWARDED_BODY} bytes ({wire.MAX_BODY} without a valid token)", _ERROR
                ),
                502: Documented("the destination could not be reached, or answered over the proxy's cap", _ERROR),
                503: Documented("an armed request the lab abandoned (chaos runs only)", _ERROR, (RETRY_AFTER,)),
            },
        )
        for method in FORWARDED_METHODS
    )


ROUTES = Routes(
    (
        Resource(
            "/ledgers/{ledger}/effects",
            (
                Operation(
                    "POST",
                    "send",
                    "Send an effect (Idempotency-Key optional)",
                    commands.SendEffect,
                    (
                        LEDGER,
                        Param("idempotency-key", Source.HEADER, wire.KEY),
                        Param(
                            "x-testbed-attempt",
                            Source.HEADER,
                            wire.ATTEMPT,
                            description="the client's attempt number, for the log",
                        ),
                        Param(wire.CHAOS, Source.HEADER, wire.HIT_HEADER, description="the lab's armed fault"),
                    ),
                    wire.SEND_BODY,
                    answers={**_SENT, **_UNKNOWN_LEDGER},
                ),
                Operation(
                    "GET",
                    "listing",
                    "The listing by reference: may lag, leaves withdrawn effects out",
                    commands.ListEffects,
                    (LEDGER, Param("reference", Source.QUERY, wire.NAME, required=True)),
                    answers={200: Documented("the effects listed", (wire.LISTING,)), **_UNKNOWN_LEDGER},
                ),
            ),
            gated=True,
        ),
        Resource(
            "/health",
            (
                Operation(
                    "GET", "health", "Health", commands.CheckHealth, answers={200: Documented("up", (wire.HEALTH,))}
                ),
            ),
            open=True,
        ),
        Resource(
            "/ledgers/{ledger}",
            (
                Operation(
                    "PUT",
                    "put_ledger",
                    "Make a ledger, or replace its contract",
                    commands.PutLedger,
                    (LEDGER,),
                    wire.CONTRACT_BODY,
                    answers={200: Documented("the ledger's contract", (wire.LEDGER,))},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/effects/{reference}",
            (
                Operation(
                    "GET",
                    "lookup",
                    "Look an effect up by reference: strongly consistent",
                    commands.LookUpEffect,
                    (LEDGER, REFERENCE),
                    answers={
                        200: Documented("applied", (wire.FOUND,)),
                        404: Documented("never applied (or unknown ledger)", (wire.NOT_FOUND, wire.ERROR)),
                        409: Documented("not applied yet: a send is in flight", (wire.NOT_FOUND,)),
                        410: Documented("applied, then withdrawn", (wire.FOUND,)),
                        **_NO_LOOKUP,
                    },
                ),
            ),
            gated=True,
        ),
        Resource(
            "/ledgers/{ledger}/log",
            (
                Operation(
                    "GET",
                    "log",
                    "The ledger's whole effect log, in order, a page at a time (withdrawn effects included)",
                    commands.ReadLog,
                    (
                        LEDGER,
                        Param(
                            "after",
                            Source.QUERY,
                            Integer(0, 2**62),
                            default=0,
                            description="list effects after this log position",
                        ),
                        Param("limit", Source.QUERY, Integer(1, 1000), default=100),
                    ),
                    answers={200: Documented("a page of the log", (wire.LOG,)), **_UNKNOWN_LEDGER},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/clock",
            (
                Operation(
                    "POST",
                    "advance_clock",
                    "Advance the ledger's clock (key expiry)",
                    commands.AdvanceClock,
                    (LEDGER,),
                    wire.CLOCK_BODY,
                    answers={200: Documented("the clock's offset", (wire.OFFSET,)), **_UNKNOWN_LEDGER},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/effects/{reference}/withdraw",
            (
                Operation(
                    "POST",
                    "withdraw",
                    "Withdraw a reference's effects",
                    commands.WithdrawEffects,
                    (LEDGER, REFERENCE),
                    answers={200: Documented("how many were withdrawn", (wire.WITHDRAWN,)), **_UNKNOWN_LEDGER},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/scope",
            (
                Operation(
                    "PUT",
                    "put_scope",
                    "The secret the ledger's scoped URLs (users' jobs) are signed with",
                    commands.PutScope,
                    (LEDGER,),
                    wire.SCOPE_BODY,
                    answers={200: Documented("set", (wire.SCOPE,)), **_UNKNOWN_LEDGER},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/destination",
            (
                Operation(
                    "PUT",
                    "put_destination",
                    "The real destination the ledger's users' jobs reach through the lab, and its effects",
                    commands.PutDestination,
                    (LEDGER,),
                    wire.DESTINATION_BODY,
                    answers={200: Documented("set", (wire.DESTINATION,)), **_UNKNOWN_LEDGER},
                ),
            ),
        ),
        Resource(
            "/ledgers/{ledger}/audit",
            (
                Operation(
                    "POST",
                    "audit",
                    "What the log holds for these references (read-only)",
                    commands.AuditLedger,
                    (LEDGER,),
                    wire.AUDIT_BODY,
                    answers={200: Documented("the effect count and each reference's counts", (wire.AUDIT,))},
                ),
            ),
        ),
        Resource(
            "/openapi.json",
            (
                Operation(
                    "GET",
                    "openapi",
                    "This document",
                    commands.GetDocument,
                    answers={200: Documented("the document", (wire.DOCUMENT,))},
                ),
            ),
        ),
        Resource(
            ROOT + "/{token}/api/{path:path}",
            _scoped_sends(),
            gated=True,
            open=True,
            refusal="only POST, PUT, PATCH and DELETE under /api/ are effects; GET {base}/effects",
        ),
        Resource(
            ROOT + "/{token}/effects",
            (
                Operation(
                    "GET",
                    "scoped_lookup",
                    "Look the scope's op up: strongly consistent",
                    commands.ScopedLookUp,
                    (TOKEN,),
                    answers={
                        200: Documented("applied", (wire.SCOPED_LOOKUP,)),
                        404: Documented("never applied, nothing in flight", (wire.SCOPED_LOOKUP,)),
                        409: Documented("a send is in flight", (wire.SCOPED_LOOKUP,)),
                        410: Documented("applied, then withdrawn", (wire.SCOPED_LOOKUP,)),
                        **_NO_LOOKUP,
                        **_BAD_SCOPE,
                    },
                ),
            ),
            gated=True,
            open=True,
        ),
        Resource(
            ROOT + "/{token}/listing",
            (
                Operation(
                    "GET",
                    "scoped_listing",
                    "The listing of the scope's op: may lag, leaves withdrawn effects out",
                    commands.ScopedList,
                    (TOKEN,),
                    answers={200: Documented("the effects listed", (wire.SCOPED_LISTING,)), **_BAD_SCOPE},
                ),
            ),
            gated=True,
            open=True,
        ),
        Resource(
            DESTINATION_ROOT + "/{token}/{path:path}",
            _forwards(),
            gated=True,
            open=True,
        ),
    )
)
