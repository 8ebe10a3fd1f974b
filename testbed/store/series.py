"""A load cell's progress over time, sampled as it runs (pure: the runner
passes in what it reads; nothing here does I/O).

Each point is `{"t": seconds since the cell started, "over": jobs returned
or given up so far, "kills": kills so far, "effects": effects at the
provider so far}`; the row stores the list as `series`, and the report draws
throughput (from consecutive `over`), kills and effects from it.

Memory stays bounded however long the run: when the series is full, every
other point is dropped and the sampling interval doubles, so a 100,000-op
run keeps at most `limit` points spread over its whole length.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Series:
    interval: float = 1.0  # seconds between points (doubles each time the series is thinned)
    limit: int = 512
    points: list[dict[str, float]] = field(default_factory=list)
    _next: float = 0.0

    def due(self, elapsed: float) -> bool:
        """Whether a point is wanted now (so the runner reads the provider's count only then)."""
        return elapsed >= self._next

    def sample(self, elapsed: float, over: int, kills: int, effects: int, *, final: bool = False) -> bool:
        """Record a point if one is due (always when `final`); True if it was recorded."""
        if not final and not self.due(elapsed):
            return False
        if len(self.points) >= self.limit:
            # keep the first point and every other one after it; the newest arrives now
            self.points = self.points[::2]
            self.interval *= 2
        self.points.append({"t": round(elapsed, 3), "over": over, "kills": kills, "effects": effects})
        self._next = elapsed + self.interval
        return True

    def to_json(self) -> list[dict[str, float]]:
        return list(self.points)
