"""testbed: a crash-test lab for the side effects of agent tool calls and queue jobs.

For a user's own job: `testbed.boundary("before-request")` passes a worker-side
boundary where the lab cannot see it (a client it does not instrument); it
does nothing outside the lab.
"""

from __future__ import annotations

from typing import Any

__all__ = ["boundary"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: importing the lab's package costs user code nothing.
    if name == "boundary":
        from workers.scope import boundary

        return boundary
    raise AttributeError(f"module 'testbed' has no attribute {name!r}")
