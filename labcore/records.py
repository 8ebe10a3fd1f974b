"""The one text format of a state and its detail, as the work-horse stores
them in Redis: the local marker of an op, and the outcome of its last attempt."""

from __future__ import annotations

_SEP = "|"


def encode(state: str, detail: str = "") -> str:
    return f"{state}{_SEP}{detail}"


def decode(raw: str | bytes | None) -> tuple[str, str] | None:
    if raw is None:
        return None
    text = raw.decode() if isinstance(raw, bytes) else raw
    state, _, detail = text.partition(_SEP)
    return state, detail
