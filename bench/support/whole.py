"""Timing whole programs, as `article_speed.py` and `celery_speed.py` compare the lab with a
raw queue: each program from the interpreter's start to its exit, and the ratios of a set of
runs taken as the median of each run's own."""

from __future__ import annotations

import resource
import statistics
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Timed:
    """One program's run: its wall time, and its CPU time and page faults (minor and
    major), its own and every reaped descendant's, as the kernel counts them for `wait4`."""

    wall: float
    cpu: float
    faults: int


def timed(argv: list[str], cwd: Path, stdout: Path) -> Timed:
    """`argv` run to its end, its output in `stdout` (its errors beside it, `.err`): a program
    that fails ends the benchmark with its last word."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    errors = stdout.with_suffix(".err")
    with open(stdout, "w") as out, open(errors, "w") as err:
        code = subprocess.run(argv, cwd=cwd, stdout=out, stderr=err).returncode
    wall = time.perf_counter() - started
    if code != 0:
        last = (errors.read_text(errors="replace").strip().splitlines() or ["(nothing on stderr)"])[-1]
        raise SystemExit(f"{Path(argv[1]).name if argv[1] != '-m' else argv[2]} exited with {code}: {last}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return Timed(wall, cpu, after.ru_minflt + after.ru_majflt - before.ru_minflt - before.ru_majflt)


def paired(pairs: list[tuple[Timed, Timed]], field: str) -> float:
    """The median of the runs' own ratios, the lab's `field` to the raw queue's (each pair is
    (raw, lab)): each run's programs go back to back and share the machine's speed of the
    moment, which the medians' ratio does not."""
    return float(statistics.median(getattr(ours, field) / getattr(theirs, field) for theirs, ours in pairs))


def runs(times: list[float]) -> str:
    return ", ".join(f"{t:.1f}" for t in times)
