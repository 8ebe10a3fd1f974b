"""A real destination's two sides per op, as the report sets them side by side (pure)."""

from __future__ import annotations

import pytest

from testbed.report.destination import Attempt, OpSides


@pytest.mark.parametrize(
    ("attempts", "records", "shows"),
    [
        ({1: Attempt(effects=1, reads=1)}, 1, ""),
        ({1: Attempt(effects=1), 2: Attempt(effects=1)}, 2, ""),  # a duplicate both sides agree on
        (
            {1: Attempt(effects=1), 2: Attempt(effects=1)},
            1,
            "the destination kept 1 of 2 forwarded effects (it deduplicated)",
        ),
        ({1: Attempt(effects=1)}, 0, "a forwarded effect left no record"),
        ({}, 1, "1 record(s) that no forwarded effect explains"),
        ({1: Attempt(effects=1, unanswered=1)}, 1, ""),  # applied, its answer lost on the way back
        ({1: Attempt(reads=2)}, 0, ""),
    ],
)
def test_what_the_two_sides_show_together(attempts: dict[int, Attempt], records: int, shows: str) -> None:
    assert OpSides("op-1", attempts, records).finding() == shows
