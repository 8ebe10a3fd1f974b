"""What an exploration tried: each (attempt, boundary, fault), how many trials
armed it and how many times it struck (an armed fault strikes only if its
attempt runs and reaches its boundary). Pure; kept in results.json as the
report's heatmap draws it (`testbed.report.coverage`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from labcore.boundaries import ORDER
from labcore.faults import Fault
from labcore.schedule import Schedule

Place = tuple[int, str, str]  # (attempt, boundary, fault)

_BOUNDARY = {b.value: n for n, b in enumerate(ORDER)}
_FAULT = {f.value: n for n, f in enumerate(Fault)}


@dataclass(slots=True)
class Coverage:
    armed: Counter[Place] = field(default_factory=Counter)
    struck: Counter[Place] = field(default_factory=Counter)

    def add(self, schedule: Schedule, history: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
        """A trial: what its schedule armed, and the hits its ops' histories show."""
        for a in schedule.strikes:
            self.armed[(a.attempt, a.boundary.value, a.fault.value)] += 1
        for events in history.values():
            for e in events:
                if e.get("event") == "hit":
                    self.struck[(int(e["attempt"]), str(e["boundary"]), str(e["fault"]))] += 1

    def to_json(self) -> list[dict[str, Any]]:
        """One entry per place armed, faults in their order, then boundaries, then attempts."""
        places = sorted(self.armed, key=lambda p: (_FAULT[p[2]], _BOUNDARY[p[1]], p[0]))
        return [
            {"attempt": a, "boundary": b, "fault": f, "armed": self.armed[(a, b, f)], "struck": self.struck[(a, b, f)]}
            for a, b, f in places
        ]
