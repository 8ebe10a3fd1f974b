"""Rows of a results.json, as the renderers' tests build them: every field a run writes, overridable."""

from __future__ import annotations

from typing import Any


def row(strategy: str, boundary: str, fault: str = "kill", scenario: str = "none", **values: Any) -> dict[str, Any]:
    control = boundary == "none"
    out: dict[str, Any] = {
        "strategy": strategy,
        "boundary": boundary,
        "injected": not control,
        "intended": 10,
        "requests": 10,
        "kills": 0,
        "effects": 10,
        "duplicateEffects": 0,
        "missingOperations": 0,
        "skippedWithoutEffect": 0,
        "fault": "none" if control else fault,
        "scenario": scenario,
        "workers": 2,
        "faults": 0,
        "lookups": 0,
        "unresolved": 0,
        "conflicts": 0,
        "failedByProvider": 0,
        "falseCompletions": 0,
        "unrecordedEffects": 0,
        "withdrawnEffects": 0,
        "jobsFailed": 0,
        "replays": 0,
        "replayLatencyMs": None,
        "wallSeconds": 0.5,
        "expected": {},
        "verdict": "pass",
        "differences": [],
        "held": [],
    }
    return out | values
