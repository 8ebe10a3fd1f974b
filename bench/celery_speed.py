"""The default `testbed chaos --engine celery` against raw Celery, each timed as a whole program.

    python -m bench.celery_speed [--repeat 3] [--control] [--ops N] [--every N] [--parallel N]

The lab's side is `testbed chaos --engine celery`: the article's 12 cells under
each of the four delivery settings, 100 ops a cell, the first attempt of
every 10th op at a faulted boundary killed (--ops, --every and --parallel are
passed on, for quicker runs). Its results say how many jobs it ran (every
op's attempts: intended ops and replays) and how many pool children it
killed; raw Celery then drains as many tasks on as many fresh workers
(`support/raw_celery.py`: a private Redis, plain `celery worker` processes
with the lab's command line), in two ways:

- no-op tasks, as many as the lab's jobs: what the lab costs on top of
  Celery, its kills included;
- the same attempts, of which as many as the lab's kills SIGKILL their own
  pool child on their first delivery and come back (acks_late with
  reject_on_worker_lost): Celery's recovery paid on both sides. A worker
  with one pool child takes nothing else until it has noticed the child is
  gone, which the prefork pool often does only at its maintenance tick (5 s);
  that stall is Celery's, and it dominates the first ratio.

Then the lab's control cells alone (`-b none`: no kills), against raw no-op
tasks of the same count. Every program is timed from the interpreter's start
to its exit (imports, the stack, the work, the teardown), as
`article_speed.py` times the lab against raw RQ; each ratio is the median of
the runs' own, the programs taking turns (every other run starts with the
lab, the first always: its results give raw Celery its counts). With
--control, each run times raw Celery's no-op tasks a second time, last: its
ratio to itself is the noise any ratio here carries.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from bench.support.sides import ROOT, Counts, compile_project, counted, load_average
from bench.support.whole import Timed, paired, runs, timed


@dataclass(frozen=True, slots=True)
class Run:
    """One run's programs, each paired with the lab's side it is compared with."""

    chaos: Timed
    noop: Timed  # raw Celery, as many no-op tasks as the chaos run's jobs
    killing: Timed  # raw Celery, the same attempts, as many of them killed as the chaos run's
    control: Timed  # the lab's control cells alone
    control_noop: Timed  # raw Celery, as many no-op tasks as those cells' jobs
    again: Timed | None  # --control: raw Celery's no-op tasks again, last


def positive(text: str) -> int:
    value = int(text) if text.isdigit() else 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of 1 or more")
    return value


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad input is one line (no usage), and exit 2."""
        self.exit(2, f"{self.prog}: {message}\n")


def parse() -> argparse.Namespace:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=positive, default=1)
    parser.add_argument("--control", action="store_true", help="raw Celery's no-op tasks a second time, last")
    parser.add_argument("--ops", type=positive, help="passed to testbed chaos (its default: 100)")
    parser.add_argument("--every", type=positive, help="passed to testbed chaos (its default: 10)")
    parser.add_argument("--parallel", type=positive, help="passed to testbed chaos (its default: 2)")
    args = parser.parse_args()
    if args.parallel is not None and args.parallel > 16:
        parser.error("argument --parallel: testbed chaos runs 1 to 16 cells at once")
    return args


def main() -> None:
    args = parse()
    passed = [f"--{name}={value}" for name in ("ops", "every", "parallel") if (value := getattr(args, name))]
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        chaos = [sys.executable, "-m", "testbed", "chaos", "--engine", "celery", *passed, "--json"]
        lab = [*chaos, str(work / "ours.json")]
        control = [*chaos, str(work / "control.json"), "-b", "none"]
        ours: Counts | None = None
        theirs: Counts | None = None  # the control cells'
        # Raw Celery's program is a module of `bench`, run from the project's root; the lab's from the work folder.
        raw = [sys.executable, "-m", "bench.support.raw_celery"]
        done: list[Run] = []
        for run in range(args.repeat):
            before = load_average()
            # Each lab's program next to the raw drains it is compared with, the lab first in the first run.
            first = run % 2 == 0
            if first:
                chaos_time, ours = lab_side(lab, work / "ours.json", ours)
            assert ours is not None
            noop = timed([*raw, str(ours.attempts), str(ours.workers)], ROOT, work / "raw.txt")
            tasks = ours.attempts - ours.kills  # each killed task runs twice
            killing = timed([*raw, str(tasks), str(ours.workers), str(ours.kills)], ROOT, work / "raw.txt")
            if first:
                control_time, theirs = lab_side(control, work / "control.json", theirs)
            else:
                chaos_time, ours = lab_side(lab, work / "ours.json", ours)
            assert theirs is not None
            control_noop = timed([*raw, str(theirs.attempts), str(theirs.workers)], ROOT, work / "raw.txt")
            if not first:
                control_time, theirs = lab_side(control, work / "control.json", theirs)
            again = None
            if args.control:
                again = timed([*raw, str(ours.attempts), str(ours.workers)], ROOT, work / "raw.txt")
            done.append(Run(chaos_time, noop, killing, control_time, control_noop, again))
            report(done[-1], first, f"load average {before} -> {load_average()}")
        assert ours is not None and theirs is not None
        summary(done, ours, theirs)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def lab_side(argv: list[str], results: Path, known: Counts | None) -> tuple[Timed, Counts]:
    """The lab's program timed, and its counts: a passing run's are the model's, the same
    every run, so raw Celery's drains stay the lab's size whichever goes first."""
    took = timed(argv, results.parent, results.with_suffix(".txt"))
    now = counted(results)
    if known is not None and known != now:
        raise SystemExit(f"the lab's run changed size between runs: {known} then {now}")
    return took, now


def report(run: Run, first: bool, load: str) -> None:
    again = ""
    if run.again is not None:
        again = f"; raw no-op again {run.again.wall:.1f} s, {run.again.wall / run.noop.wall:.2f}x"
    print(
        f"run{' (the lab first)' if first else ''}: testbed chaos {run.chaos.wall:.1f} s; "
        f"raw Celery no-op {run.noop.wall:.1f} s ({run.chaos.wall / run.noop.wall:.2f}x), "
        f"with kills {run.killing.wall:.1f} s ({run.chaos.wall / run.killing.wall:.2f}x); "
        f"control cells {run.control.wall:.1f} s, raw no-op {run.control_noop.wall:.1f} s "
        f"({run.control.wall / run.control_noop.wall:.2f}x){again} ({load})"
    )


def summary(done: list[Run], ours: Counts, theirs: Counts) -> None:
    def walls(side: str) -> list[float]:
        return [getattr(r, side).wall for r in done]

    sides = {
        "chaos": f"testbed chaos --engine celery, {ours.cells} cells, {ours.attempts:,} jobs, {ours.kills} kills:",
        "noop": f"raw Celery, {ours.attempts:,} no-op tasks, {ours.workers} fresh workers:",
        "killing": f"raw Celery, {ours.attempts - ours.kills:,} tasks, {ours.kills} killed once:",
        "control": f"testbed chaos -b none, {theirs.cells} cells, {theirs.attempts:,} jobs:",
        "control_noop": f"raw Celery, {theirs.attempts:,} no-op tasks:",
    }
    width = max(map(len, sides.values()))
    print(f"machine: {os.cpu_count()} cpus")
    for side, label in sides.items():
        print(f"{label:{width}} {statistics.median(walls(side)):6.1f} s   runs: {runs(walls(side))}")
    ratios = {
        "chaos / raw no-op:    ": [(r.noop, r.chaos) for r in done],
        "chaos / raw killed:   ": [(r.killing, r.chaos) for r in done],
        "control / raw no-op:  ": [(r.control_noop, r.control) for r in done],
    }
    for label, pairs in ratios.items():
        print(
            f"{label}{paired(pairs, 'wall'):.2f}x wall, the median of the runs' ratios "
            f"(runs {min(o.wall / t.wall for t, o in pairs):.2f}x to {max(o.wall / t.wall for t, o in pairs):.2f}x); "
            f"{paired(pairs, 'cpu'):.2f}x in CPU"
        )
    itself = [r.again.wall / r.noop.wall for r in done if r.again is not None]
    if itself:
        spread = f"from {min(itself):.2f}x to {max(itself):.2f}x"
        print(f"raw no-op / itself: {statistics.median(itself):.2f}x, the same program twice in a run ({spread})")


if __name__ == "__main__":
    main()
