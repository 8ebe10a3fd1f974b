"""The provider's receipt for an applied effect: the id a worker records as proof."""

from __future__ import annotations

_PREFIX = "eff_"


def receipt(effect_id: int) -> str:
    return f"{_PREFIX}{effect_id}"


def effect_id(text: str) -> int | None:
    """The effect a receipt names, or None if it names none."""
    digits = text.removeprefix(_PREFIX)
    return int(digits) if text.startswith(_PREFIX) and digits.isdigit() else None
