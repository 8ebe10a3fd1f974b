"""The named points of an attempt where a fault can be injected.

The order is the order in which an attempt passes them. Two of them lie
inside the provider (the request has arrived; the effect is or is not
applied yet); the others lie in the work-horse.
"""

from __future__ import annotations

from enum import StrEnum

from labcore.choices import pick


class Boundary(StrEnum):
    JOB_START = "job-start"
    BEFORE_REQUEST = "before-request"
    BEFORE_EFFECT = "before-effect"
    AFTER_EFFECT = "after-effect"
    AFTER_RECEIPT = "after-receipt"
    AFTER_RECORD = "after-record"

    @property
    def on_provider(self) -> bool:
        return self in PROVIDER_SIDE


PROVIDER_SIDE = frozenset({Boundary.BEFORE_EFFECT, Boundary.AFTER_EFFECT})
ORDER = tuple(Boundary)

# The control cell of every table: no fault is armed.
NONE = "none"


def parse_boundary(text: str) -> Boundary | None:
    """`none` is the control column; anything else must name a boundary."""
    return pick("boundary", text, {NONE: None, **{b.value: b for b in ORDER}})


def boundary_label(boundary: Boundary | None) -> str:
    return NONE if boundary is None else boundary.value
