"""The ids that travel between the parts: ops, hits and RQ jobs. Each is
written and parsed here only."""

from __future__ import annotations

from dataclasses import dataclass


def op_id(seq: int) -> str:
    """An intended operation's persisted identity."""
    return f"tenant-demo:notification:{seq}"


def seq_of(op: str) -> int:
    """The sequence number in an op id (`op_id`'s inverse; a re-minted id has it too)."""
    return int(op.split(":")[2])


def reminted_id(op: str) -> str:
    """The identity the planner re-creates an op under (the remint scenario)."""
    return f"{op}:r1"


@dataclass(frozen=True, slots=True)
class HitId:
    """One armed (op, attempt, boundary) of one cell."""

    cell: str
    seq: int
    attempt: int
    boundary: str

    def __str__(self) -> str:
        return f"{self.cell}:{self.seq}:{self.attempt}:{self.boundary}"

    @classmethod
    def parse(cls, text: str) -> HitId | None:
        parts = text.split(":")
        if len(parts) != 4 or not parts[1].isdigit() or not parts[2].isdigit():
            return None
        return cls(parts[0], int(parts[1]), int(parts[2]), parts[3])


class JobKind:
    """A job the planner adds for an op carries a suffix."""

    FIRST = ""
    DUPLICATE = "d"  # the same op enqueued again
    REMINT = "r"  # the op re-created under a new identity


@dataclass(frozen=True, slots=True)
class JobId:
    cell: str
    seq: int
    kind: str = JobKind.FIRST

    def __str__(self) -> str:
        return f"{self.cell}-{self.seq}" + (f"-{self.kind}" if self.kind else "")

    @classmethod
    def parse(cls, text: str) -> JobId | None:
        parts = text.split("-")
        if len(parts) not in (2, 3) or not parts[1].isdigit():
            return None
        return cls(parts[0], int(parts[1]), parts[2] if len(parts) == 3 else JobKind.FIRST)

    @staticmethod
    def of_cell(text: str, cell: str) -> bool:
        return text.startswith(f"{cell}-")
