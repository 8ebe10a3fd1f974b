"""Evidence readers that fail, for the tests of what ends a run (tests/e2e/test_destinations.py)."""

from __future__ import annotations


def raises(destination_url: str, op_ids: list[str]) -> dict[str, list[str]]:
    raise RuntimeError("the sandbox is down")
