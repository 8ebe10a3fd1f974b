"""The provider's contract as pure decisions.

Modelled on the IETF Idempotency-Key draft and Stripe's documented behaviour:
the same key with the same payload replays the stored response (success or
error) and applies nothing; the same key with another payload is rejected
(422); the same key while the first request is in flight gets 409; keys are
forgotten after a retention window. The store applies these decisions under
one lock, so the lookup and the append are a single atomic step.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Contract:
    dedup: bool = True  # honour Idempotency-Key at all
    retention_seconds: float = DAY
    single_lookup: bool = True  # GET by reference is offered (strongly consistent)
    listing_lag_seconds: float = 0.0  # the listing shows an effect this long after it is applied
    decline_domain: str = ""  # recipients at this domain get a permanent 402

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Contract:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


@dataclass(frozen=True, slots=True)
class StoredKey:
    fingerprint: str
    status: int
    response: dict[str, Any]
    created_at: float


class Decision(StrEnum):
    APPLY = "apply"
    REPLAY = "replay"
    CONFLICT = "conflict"  # 422
    IN_FLIGHT = "in-flight"  # 409


def decide(
    contract: Contract,
    key: str | None,
    stored: StoredKey | None,
    key_in_flight: bool,
    payload_fingerprint: str,
    now: float,
) -> Decision:
    if not contract.dedup or not key:
        return Decision.APPLY
    if stored is not None and now - stored.created_at > contract.retention_seconds:
        stored = None  # past retention the key is as good as never seen
    if stored is not None:
        return Decision.REPLAY if stored.fingerprint == payload_fingerprint else Decision.CONFLICT
    if key_in_flight:
        return Decision.IN_FLIGHT
    return Decision.APPLY


def declines(contract: Contract, payload: dict[str, Any]) -> bool:
    """Whether applying this payload ends in a permanent provider error instead of an effect."""
    if not contract.decline_domain:
        return False
    return str(payload.get("recipient", "")).endswith("@" + contract.decline_domain)


DECLINED_STATUS = 402


@dataclass(frozen=True, slots=True)
class EffectRow:
    id: int
    fingerprint: str
    applied_at: float
    withdrawn: bool


def lookup_status(effects: list[EffectRow], in_flight: bool) -> tuple[int, EffectRow | None]:
    """The strongly consistent single-item read: 200 found, 410 withdrawn,
    409 a request is still in flight, 404 never existed."""
    live = [e for e in effects if not e.withdrawn]
    if live:
        return 200, live[-1]
    if effects:
        return 410, effects[-1]
    if in_flight:
        return 409, None
    return 404, None


def listed(effect: EffectRow, contract: Contract, now: float) -> bool:
    """The listing lags behind the log and leaves withdrawn effects out."""
    return not effect.withdrawn and effect.applied_at <= now - contract.listing_lag_seconds
