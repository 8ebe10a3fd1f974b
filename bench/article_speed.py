"""The default 12-cell `testbed chaos` against raw RQ, and against the article's Node script.

    python -m bench.article_speed [PATH/TO/crash-lab.mjs] [--repeat 3] [--control]

Baseline: plain `rq worker` processes (as many as the chaos run's workers, 4;
the lab's worker class, as `throughput.py` says why)
draining as many no-op jobs as the chaos run's jobs (1,280: 1,200 ops and 80
retries), started fresh on a private Redis by `support/raw_rq.py`. Both are timed as
whole programs, from starting the interpreter to its exit: imports, starting
the stack, the jobs, stopping the stack (target: testbed within 1.1x of raw
RQ). With the article's script (saved by
the user; it is not part of this project) and `node` on PATH, it runs too
(target: testbed at least 8x faster); that figure depends as much on how fast
Node forks on the machine as on the lab. Each time is the median of
--repeat runs, the programs taking turns (every other run starts with the
lab); the machine's load average is
printed with each run. The ratio is the median of the runs' own ratios, as
`throughput.py` takes its pairs: each run's programs go back to back, and on
these VMs the machine's speed drifts from run to run (raw RQ alone took 11.5
to 16.0 s within minutes), which a run's two programs share and a ratio of
the medians does not. That ratio is printed too, and so is the ratio of the
two sides' CPU (user and system time of each program and every process it
started and reaped, as the kernel counts it for `wait4`): with both cores
busy from start to end, the wall ratio is about the CPU ratio, plus what
each side leaves a core idle for. Beside the CPU, each run prints both
sides' page faults a job (counted the same way): a count the VM's speed does
not move, where the kernel's time, over half of either side's CPU here, goes
mostly to forks, page faults and exits.

With --control, each run times raw RQ a second time, after the lab: the
ratio of raw RQ to itself is how far apart the same program lands twice in
a row on this machine, the spread any ratio here carries; and the lab
against the mean of the raw runs either side of it is that run's ratio with
the machine's drift over the run taken out, as far as it is steady. The
headline stays the first figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.support.sides import CHAOS_JOBS, CHAOS_WORKERS, ROOT, compile_project, load_average
from bench.support.whole import Timed, paired, runs, timed


def lab_first(run: int, control: bool) -> bool:
    """Every other run starts with the lab: a program that runs second on these VMs
    tends to take a little longer than the first (raw RQ after itself, 1.02x to
    1.03x in one set), and a fixed order would charge that to one side. With
    --control, raw RQ runs both before and after the lab instead."""
    return not control and run % 2 == 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("script", type=Path, nargs="?", help="the article's crash-lab.mjs (optional)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--control", action="store_true", help="raw RQ a second time in each run, after the lab")
    args = parser.parse_args()
    node = shutil.which("node") if args.script is not None else None
    if args.script is not None and node is None:
        sys.exit("node is not on PATH: nothing to run the article's script with")
    if args.script is not None and not args.script.is_file():
        sys.exit(f"no such file: {args.script}")
    compile_project()
    work = Path(tempfile.mkdtemp(prefix="testbed-bench-"))
    try:
        node_times: list[float] = []
        pairs: list[tuple[Timed, Timed]] = []  # each run's raw RQ and lab
        again: list[float] = []  # --control: raw RQ's second wall time, each run
        # Raw RQ's program is a module of `bench`, run from the project's root; the lab's from the work folder.
        raw = [sys.executable, "-m", "bench.support.raw_rq", str(CHAOS_JOBS), str(CHAOS_WORKERS)]
        chaos = [sys.executable, "-m", "testbed", "chaos", "--json", str(work / "ours.json")]
        for run in range(args.repeat):
            before = load_average()
            if node is not None:
                node_times.append(timed([node, str(args.script.resolve())], work, work / "node.json").wall)
                assert json.loads((work / "node.json").read_text())["assertions"] == "passed"
            first = lab_first(run, args.control)
            if first:
                our = timed(chaos, work, work / "ours.txt")
            theirs = timed(raw, ROOT, work / "raw.txt")
            if not first:
                our = timed(chaos, work, work / "ours.txt")
            assert json.loads((work / "ours.json").read_text())["verdict"] == "pass"
            pairs.append((theirs, our))
            control = ""
            if args.control:
                again.append(timed(raw, ROOT, work / "raw.txt").wall)
                control = f"; raw RQ again {again[-1]:.1f} s, {again[-1] / theirs.wall:.2f}x its first"
            load = f"load average {before} -> {load_average()}"
            print(
                f"run{' (the lab first)' if first else ''}: "
                f"raw RQ {theirs.wall:.1f} s, testbed chaos {our.wall:.1f} s, {our.wall / theirs.wall:.2f}x; "
                f"CPU {theirs.cpu:.1f} s and {our.cpu:.1f} s, {our.cpu / theirs.cpu:.2f}x; "
                f"page faults a job {theirs.faults / CHAOS_JOBS:,.0f} and {our.faults / CHAOS_JOBS:,.0f}, "
                f"{our.faults / theirs.faults:.2f}x{control} ({load})"
            )
        raw_times, ours = [r.wall for r, _ in pairs], [o.wall for _, o in pairs]
        raw_wall, our_wall = statistics.median(raw_times), statistics.median(ours)
        print(f"machine: {os.cpu_count()} cpus")
        raw_label = f"raw RQ, {CHAOS_JOBS} no-op jobs, {CHAOS_WORKERS} fresh workers:"
        print(f"{raw_label} {raw_wall:6.1f} s   runs: {runs(raw_times)}")
        print(f"{'testbed chaos:':{len(raw_label)}} {our_wall:6.1f} s   runs: {runs(ours)}")
        print(f"testbed / raw RQ: {paired(pairs, 'wall'):.2f}x, the median of the runs' ratios (target 1.1x or less)")
        print(f"                  {our_wall / raw_wall:.2f}x, the ratio of the medians")
        print(f"                  {paired(pairs, 'cpu'):.2f}x in CPU, the median of the runs' ratios")
        faults = [statistics.median(t.faults / CHAOS_JOBS for t in side) for side in zip(*pairs, strict=True)]
        print(
            f"                  {paired(pairs, 'faults'):.2f}x in page faults "
            f"({faults[0]:,.0f} and {faults[1]:,.0f} a job, medians)"
        )
        if args.control:
            bracketed = statistics.median(o / ((r + a) / 2) for r, o, a in zip(raw_times, ours, again, strict=True))
            print(f"                  {bracketed:.2f}x against the mean of raw RQ either side")
            itself = [a / r for r, a in zip(raw_times, again, strict=True)]
            spread = f"from {min(itself):.2f}x to {max(itself):.2f}x"
            print(f"raw RQ / raw RQ:  {statistics.median(itself):.2f}x, the same program twice in a row ({spread})")
        if node is not None:
            node_wall = statistics.median(node_times)
            version = subprocess.check_output([node, "--version"], text=True).strip()
            print(f"article script (node {version}): {node_wall:6.1f} s   runs: {runs(node_times)}")
            print(f"speed-up over the article's script: {node_wall / our_wall:.1f}x (target 8x)")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
