"""The provider's requests as they arrive: their bounds, the models of their bodies and of the armed hit's header.

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

MAX_BODY = 64 * 1024  # every legitimate body is under 11 KiB
MAX_KEY = 255  # Stripe's limit for Idempotency-Key
MAX_NAME = 200  # ledger names and references
MAX_ATTEMPT = 1_000_000  # far above any Retry(max=N); keeps the log's INTEGER column in range
MAX_SECONDS = 10 * 365 * 86_400.0  # retention, listing lag, one clock step: finite and bounded
MAX_CHAOS = 8192  # the armed hit's header
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
