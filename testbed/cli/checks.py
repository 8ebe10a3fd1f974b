"""Checks made before a run starts, so that no bad input costs a run: where the
results go, and whether the run is one the user means to wait for."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from labcore.credentials import TOKEN_ENV
from testbed import inputs
from testbed.errors import UsageError
from testbed.store import files

# A bearer token is a few dozen bytes: a file past this is not one (and a device never ends).
TOKEN_CAP = 4096

# Past either limit a run needs --yes: it would keep the machine busy or its Redis big for long.
CONFIRM_SECONDS = 30 * 60
CONFIRM_MEGABYTES = 2048
# A run this long gets its estimate printed first.
ANNOUNCE_SECONDS = 60

# For the estimate, measured on a 2-core machine: a forking RQ worker finishes about
# 20 jobs a second per core it has; a job and its op's intent take about 1.5 KB in
# Redis while queued.
_JOBS_PER_CORE_SECOND = 20.0
_BYTES_PER_QUEUED_JOB = 1500


def output_file(option: str, path: Path) -> None:
    """A file the run will write at its end: checked now, not after the run."""
    if (held := files.occupant(path)) is not None:  # never written through, nor replaced
        raise UsageError(f"{option} {path}: {held}, not a regular file")
    parent = path.parent
    if not parent.is_dir():
        raise UsageError(f"{option} {path}: directory {parent} does not exist")
    # The file is written next to its place and moved there: try exactly that
    # (permissions alone do not tell, for root or on a file system like /proc).
    try:
        files.probe(path)
    except files.Unwritable:
        raise UsageError(f"{option} {path}: not writable") from None


def token(option: str, path: Path | None) -> str | None:
    """The provider's token: from the file `option` names (a regular file of one line, at most
    TOKEN_CAP bytes; else one line, exit 2), else from $TESTBED_PROVIDER_TOKEN (never the command line)."""
    if path is None:
        return os.environ.get(TOKEN_ENV, "").strip() or None
    try:
        text = inputs.read_bytes(path, TOKEN_CAP).decode()
    except inputs.InputError as exc:
        raise UsageError(f"{option} {inputs.quoted(str(path))}: {exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{option} {inputs.quoted(str(path))}: not text") from None
    if len(found := text.strip().splitlines()) > 1:
        raise UsageError(f"{option} {inputs.quoted(str(path))}: {len(found)} lines, not a token of one line")
    return found[0].strip() if found else None


def finite(option: str, value: float, low: float, high: float) -> None:
    if not math.isfinite(value) or not low <= value <= high:
        raise UsageError(f"{option} must be from {_number(low)} to {_number(high)} (got {_number(value)})")


def cell_timeout(given: float | None) -> None:
    """--cell-timeout, where given (else the run's own)."""
    if given is not None:
        finite("--cell-timeout", given, 1, 7 * 86_400)


def _number(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class Estimate:
    jobs: int
    seconds: float
    megabytes: float

    @classmethod
    def of(cls, cells: int, ops: int, faulted_share: float, retries: int, workers: int, queued: int) -> Estimate:
        """`queued`: jobs in Redis at once at most (a window, or whole cells)."""
        jobs = int(cells * ops * (1 + faulted_share * max(retries, 1)))
        rate = _JOBS_PER_CORE_SECOND * max(1, min(workers, os.cpu_count() or 1))
        return cls(jobs, jobs / rate, queued * _BYTES_PER_QUEUED_JOB / 1e6)

    def text(self) -> str:
        minutes = self.seconds / 60
        took = (
            f"{minutes / 60:,.0f} h"
            if minutes >= 120
            else f"{minutes:.0f} min"
            if minutes >= 2
            else f"{self.seconds:.0f} s"
        )
        return f"about {self.jobs:,} jobs, {took} on this machine, Redis up to {self.megabytes:,.0f} MB"

    def confirm(self, yes: bool) -> str | None:
        """A line to print first, or None; a UsageError for a run past the limits without --yes."""
        if (self.seconds > CONFIRM_SECONDS or self.megabytes > CONFIRM_MEGABYTES) and not yes:
            raise UsageError(
                f"this run would take {self.text()}: more than {CONFIRM_SECONDS // 60} min"
                f" or {CONFIRM_MEGABYTES:,} MB; add --yes to run it"
            )
        return f"estimate: {self.text()}" if self.seconds > ANNOUNCE_SECONDS else None
