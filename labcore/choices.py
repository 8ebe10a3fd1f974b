"""Looking a user-given name up in one of the lab's tables."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


def pick(kind: str, name: str, table: Mapping[str, T]) -> T:
    """The entry for `name`, or a ValueError that lists the valid names."""
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"unknown {kind} {name!r} (choose from {', '.join(table)})") from None
