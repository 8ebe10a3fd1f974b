"""Every Redis key a run writes, under the run's own prefix.

RQ's keys get the prefix too (`RQ_KEY_PREFIX`, set before rq is imported), so
a run on a shared Redis writes nothing outside `testbed:<run-id>:`.
"""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass

QUEUE = "ops"


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


RUNS_PREFIX = "testbed"


def run_prefix(run_id: str) -> str:
    return f"{RUNS_PREFIX}:{run_id}"


# What new_run_id and run_prefix make, and nothing else (a provider checks a prefix it is handed).
RUN_PREFIX = re.compile(r"testbed:[0-9]{8}-[0-9]{6}-[0-9a-f]{6}")


def rq_prefix(prefix: str) -> str:
    return f"{prefix}:rq"


@dataclass(frozen=True, slots=True)
class RunKeys:
    prefix: str

    @property
    def bus(self) -> str:
        """Hits and watched-op events, consumed by the chaos controller."""
        return f"{self.prefix}:bus"

    def release(self, hit: str) -> str:
        return f"{self.prefix}:release:{hit}"

    def settled(self, hit: str) -> str:
        """The controller is done with this fault: the op's next attempt may start."""
        return f"{self.prefix}:settled:{hit}"

    def reported(self, hit: str) -> str:
        return f"{self.prefix}:reported:{hit}"

    def acted(self, hit: str) -> str:
        """A holding provider has carried out its release."""
        return f"{self.prefix}:acted:{hit}"

    @property
    def ready_workers(self) -> str:
        """The workers taking tasks, by name, of an engine that keeps no registry of its own."""
        return f"{self.prefix}:ready-workers"

    @property
    def busy_workers(self) -> str:
        """The workers in a task, by name, of an engine whose workers say so nowhere else: from
        an attempt's start until what it left is counted (`leftovers`)."""
        return f"{self.prefix}:busy-workers"

    @property
    def attempts_ended(self) -> str:
        """The engine's attempts that ended by themselves (`workflow:attempt`), of an engine that
        times attempts out itself and runs them again (Temporal): one it ran again unended timed out."""
        return f"{self.prefix}:attempts-ended"

    @property
    def given_up(self) -> str:
        """The jobs given up on (a task's FAILURE), by id, of an engine that keeps no record of them."""
        return f"{self.prefix}:given-up"

    @property
    def orders(self) -> str:
        """Each job's attempt (a hash by job id), where an engine's message carries only the
        user's own arguments: a user's Temporal workflow, started with the op's payload."""
        return f"{self.prefix}:orders"

    @property
    def workflow_type(self) -> str:
        """The type a user's Temporal workflow registered under, as the run's workers found it."""
        return f"{self.prefix}:workflow-type"

    def cell(self, cell: str) -> CellKeys:
        return CellKeys(f"{self.prefix}:cell:{cell}")

    @property
    def leftovers(self) -> str:
        """How many processes the run's work-horses left behind (stopped by their workers), by
        cell id (a hash): each cell's row says its own, the run the sum."""
        return f"{self.prefix}:leftovers"

    @property
    def owner(self) -> str:
        """Alive while the run is (on a shared Redis): who runs it, and whether its keys are kept."""
        return f"{self.prefix}:owner"

    @property
    def pattern(self) -> str:
        return f"{self.prefix}:*"


@dataclass(frozen=True, slots=True)
class CellKeys:
    base: str

    @property
    def ops(self) -> str:
        """op id -> the persisted intent (identity, logical action, payload)."""
        return f"{self.base}:ops"

    @property
    def plan(self) -> str:
        """op id -> the faults armed on its attempts."""
        return f"{self.base}:plan"

    @property
    def markers(self) -> str:
        """op id -> the application's local marker."""
        return f"{self.base}:markers"

    @property
    def outcomes(self) -> str:
        """op id -> what the last finished attempt concluded."""
        return f"{self.base}:outcomes"

    @property
    def remints(self) -> str:
        """op id -> the ids the planner re-created it under."""
        return f"{self.base}:remints"

    @property
    def attempts(self) -> str:
        return f"{self.base}:attempts"

    @property
    def ended(self) -> str:
        """Count of jobs whose handler returned."""
        return f"{self.base}:ended"

    @property
    def total(self) -> str:
        """How many jobs the cell runs in all: its ops, and the jobs the planner adds.
        The job whose end brings `ended` to it pushes to `drained`."""
        return f"{self.base}:total"

    @property
    def drained(self) -> str:
        """What wakes the run's loop when the cell's last job may have returned."""
        return f"{self.base}:drained"
