"""`testbed chaos --engine temporal` against raw Temporal, each timed as a whole program.

    python -m bench.temporal [--repeat 3] [--ops N] [--every N] [--parallel N]

The lab's side is `testbed chaos --engine temporal --delivery retry` (the article's 12
cells under Temporal's default retry policy; --ops, --every and --parallel are passed
on), and its control cells alone (`-b none`: no kills). Its results say how many jobs
it ran (every op's attempts); raw Temporal then runs as many workflows of one no-op
activity on as many fresh worker processes, with the lab's worker options, on its own
dev server (`support/raw_temporal.py`). Every program is timed from the interpreter's
start to its exit, start-up (the dev server's included) and teardown too, the programs
taking turns (every other run starts with the lab, the first always: its results give
raw Temporal its counts); each ratio is the median of the runs' own.

A killed activity is noticed only when its start-to-close timeout (5 s) expires: the
cells with kills wait for it, raw no-op activities never do; the control cells' ratio
is what the lab costs on top of Temporal itself.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from bench.support.sides import ROOT, Counts, compile_project, counted, load_average
from bench.support.whole import Timed, paired, runs, timed


@dataclass(frozen=True, slots=True)
class Run:
    chaos: Timed
    noop: Timed  # raw Temporal, as many no-op activities as the chaos run's jobs
    control: Timed  # the lab's control cells alone
    control_noop: Timed  # raw Temporal, as many no-op activities as those cells' jobs


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--ops", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--parallel", type=int, default=4)
    args = parser.parse_args()
    if not (1 <= args.repeat <= 20 and 1 <= args.ops <= 1000 and args.every >= 1 and 1 <= args.parallel <= 16):
        parser.exit(2, "bench.temporal: --repeat 1 to 20, --ops 1 to 1000, --every 1 or more, --parallel 1 to 16\n")
    passed = [f"--ops={args.ops}", f"--every={args.every}", f"--parallel={args.parallel}"]
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        chaos = [sys.executable, "-m", "testbed", "chaos", "--engine", "temporal", "--delivery", "retry", *passed]
        lab = [*chaos, "--json", str(work / "ours.json")]
        control = [*chaos, "--json", str(work / "control.json"), "-b", "none"]
        raw = [sys.executable, "-m", "bench.support.raw_temporal"]
        ours: Counts | None = None
        theirs: Counts | None = None
        done: list[Run] = []
        for run in range(args.repeat):
            before = load_average()
            first = run % 2 == 0
            if first:
                chaos_time, ours = lab_side(lab, work / "ours.json")
            assert ours is not None
            noop = timed([*raw, str(ours.attempts), str(ours.workers)], ROOT, work / "raw.txt")
            if first:
                control_time, theirs = lab_side(control, work / "control.json")
            else:
                chaos_time, ours = lab_side(lab, work / "ours.json")
            assert theirs is not None
            control_noop = timed([*raw, str(theirs.attempts), str(theirs.workers)], ROOT, work / "raw.txt")
            if not first:
                control_time, theirs = lab_side(control, work / "control.json")
            done.append(Run(chaos_time, noop, control_time, control_noop))
            r = done[-1]
            print(
                f"run{' (the lab first)' if first else ''}: testbed chaos {r.chaos.wall:.1f} s, raw no-op"
                f" {r.noop.wall:.1f} s ({r.chaos.wall / r.noop.wall:.2f}x); control cells {r.control.wall:.1f} s,"
                f" raw no-op {r.control_noop.wall:.1f} s ({r.control.wall / r.control_noop.wall:.2f}x)"
                f" (load average {before} -> {load_average()})"
            )
        assert ours is not None and theirs is not None
        summary(done, ours, theirs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lab_side(argv: list[str], results: Path) -> tuple[Timed, Counts]:
    took = timed(argv, results.parent, results.with_suffix(".txt"))
    return took, counted(results)


def summary(done: list[Run], ours: Counts, theirs: Counts) -> None:
    sides = {
        "chaos": f"testbed chaos --engine temporal --delivery retry, {ours.cells} cells, {ours.attempts} jobs:",
        "noop": f"raw Temporal, {ours.attempts} no-op activities, {ours.workers} workers:",
        "control": f"testbed chaos -b none, {theirs.cells} cells, {theirs.attempts} jobs:",
        "control_noop": f"raw Temporal, {theirs.attempts} no-op activities:",
    }
    width = max(map(len, sides.values()))
    for side, label in sides.items():
        walls = [getattr(r, side).wall for r in done]
        print(f"{label:{width}} {statistics.median(walls):6.1f} s   runs: {runs(walls)}")
    for label, pairs in {
        "chaos / raw no-op:   ": [(r.noop, r.chaos) for r in done],
        "control / raw no-op: ": [(r.control_noop, r.control) for r in done],
    }.items():
        print(f"{label}{paired(pairs, 'wall'):.2f}x wall, {paired(pairs, 'cpu'):.2f}x in CPU")


if __name__ == "__main__":
    main()
